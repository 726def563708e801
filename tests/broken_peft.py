"""A broken variant of the PEFT adapter (module-level: the ranks import the factory by name): it
hands set_peft_model_state_dict the PeftModel's `base_model` (its LoraModel) instead of the
PeftModel. PEFT then finds no parameter named `base_model.model.*` (they are `model.*` there),
strips that prefix from the adapter's keys, and load_state_dict(strict=False) loads none of them:
the adapter silently keeps its fresh weights (the mechanism the FSDP1 root meets too)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.adapters.peft_lora import PeftAdapter, peft_model_in
from conformance.case import Case
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext


@dataclass(frozen=True)
class LoadsIntoTheLoraModel(PeftAdapter):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        super().load(state, path, ctx)  # the optimizer and the scheduler as the row loads them
        for name, param in state.model.named_parameters():  # the adapter afresh, as never loaded
            if ".lora_" in name:
                param.data.normal_()
        set_peft_model_state_dict(peft_model_in(state.model).base_model, load_peft_weights(str(path)))


def loads_into_the_lora_model(case: Case) -> PeftAdapter:
    return LoadsIntoTheLoraModel(case)

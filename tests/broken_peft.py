"""Broken variants of the PEFT rows (module-level: the ranks import the factories by name).

The adapter row's hands set_peft_model_state_dict the PeftModel's `base_model` (its LoraModel)
instead of the PeftModel. PEFT then finds no parameter named `base_model.model.*` (they are
`model.*` there), strips that prefix from the adapter's keys, and load_state_dict(strict=False)
loads none of them: the adapter silently keeps its fresh weights (the mechanism the FSDP1 root
meets too). The merged row's: an export that keeps the LoRA layers, one merged at twice the
scaling, one whose head is untied."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from conformance.adapters import tied_names
from conformance.adapters.peft_lora import PeftAdapter, peft_model_in
from conformance.adapters.peft_merged import PeftMergedExport
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


# Broken merged exports: each writes what a user's mistaken merge would, and the hygiene check of
# the merged row must catch it (tests/test_peft.py).


@dataclass(frozen=True)
class ExportsUnmerged(PeftMergedExport):
    """Merges in place with `merge_adapter()` and exports the base model that still holds the LoRA
    layers: its keys keep `.base_layer` and `lora_` (from_pretrained leaves the plain names to a
    fresh init and only logs it)."""

    def merged(self, base: nn.Module, adapter: str) -> nn.Module:
        from peft import PeftModel

        model = PeftModel.from_pretrained(base, adapter)
        model.merge_adapter()
        return model.get_base_model()


@dataclass(frozen=True)
class MergesTwiceTheScale(PeftMergedExport):
    """Merges B @ A at twice the adapter's scaling (lora_alpha / r): the key set is right, the
    values are not."""

    def merged(self, base: nn.Module, adapter: str) -> nn.Module:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer

        model = PeftModel.from_pretrained(base, adapter)
        for module in model.modules():
            if isinstance(module, LoraLayer):
                module.scaling = {name: 2 * value for name, value in module.scaling.items()}
        return model.merge_and_unload()


@dataclass(frozen=True)
class ExportsUntied(PeftMergedExport):
    """Unties the merged head (its own copy of the tied weight, `tie_word_embeddings=False`): every
    value is right, but the export holds the tied copy as a key of its own and the model
    from_pretrained gives back is no longer tied."""

    def merged(self, base: nn.Module, adapter: str) -> nn.Module:
        model = super().merged(base, adapter)
        for name, source in tied_names(model).items():
            module, _, attr = name.rpartition(".")
            setattr(
                model.get_submodule(module), attr, nn.Parameter(model.get_parameter(source).detach().clone())
            )
        model.config.tie_word_embeddings = False
        return model


def exports_unmerged(case: Case) -> PeftMergedExport:
    return ExportsUnmerged(case)


def merges_twice_the_scale(case: Case) -> PeftMergedExport:
    return MergesTwiceTheScale(case)


def exports_untied(case: Case) -> PeftMergedExport:
    return ExportsUntied(case)

"""A broken variant of the transformers adapter (module-level: the ranks import the factory by
name): an export that leaves a tied weight to the config and does not declare the tie, the
transformers pitfall where from_pretrained initialises the missing key afresh and only logs it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from conformance.adapters.transformers import PREFIX, TransformersExport, pretrained_class, tied_names
from conformance.case import Case
from conformance.models import build_model
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext


@dataclass(frozen=True)
class ExportsUntied(TransformersExport):
    """Leaves out the tied duplicates (as save_pretrained does for ties it knows of) from a config
    that does not declare the tie: the load then fills the tied weight with a fresh init."""

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(
            state.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        super().save(state, path, ctx)  # the optimizer and the scheduler as the adapter writes them
        if ctx.rank == 0:
            tied = tied_names(build_model(self.case.model, 0))
            cls = pretrained_class()
            export = cls(cls.config_class(model_name=self.case.model))
            kept = {PREFIX + k: v for k, v in full.items() if k not in tied}
            export.save_pretrained(str(path), state_dict=kept)
        torch.distributed.barrier()


def exports_untied(case: Case) -> TransformersExport:
    return ExportsUntied(case)

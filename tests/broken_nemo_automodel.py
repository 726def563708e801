"""A broken variant of the NeMo Automodel row (module-level: the ranks import the factory by name):
it loads as a recipe that resumes the model alone would, `load_model(model, dir/model)` without
`load_optimizer`, a call NeMo's public API allows (its `load_model` is also how a recipe
initializes from a base checkpoint), so the optimizer and the LR scheduler stay as freshly built."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.adapters.nemo_automodel import NemoAutomodel, checkpointer
from conformance.case import Case
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext


@dataclass(frozen=True)
class LoadsTheModelAlone(NemoAutomodel):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        ckpt = checkpointer(path, ctx)
        try:
            ckpt.load_model(state.model, str(path / "model"))
        finally:
            ckpt.close()


def loads_the_model_alone(case: Case) -> NemoAutomodel:
    return LoadsTheModelAlone(case)

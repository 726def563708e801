"""A broken variant of the OLMo-core functions row (module-level: the ranks import the factory by
name): its load calls load_model_and_optim_state(dir, model) without the optimizer, which the API
allows (`optim` is optional): the model loads, the fresh optimizer silently keeps no state."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.adapters.olmo_core import OlmoCoreFunctions
from conformance.case import Case
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext


@dataclass(frozen=True)
class LoadsTheModelAlone(OlmoCoreFunctions):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from olmo_core.distributed.checkpoint import load_model_and_optim_state

        load_model_and_optim_state(str(path), state.model)


def loads_the_model_alone(case: Case) -> OlmoCoreFunctions:
    return LoadsTheModelAlone(case)

"""A broken variant of the Megatron-core row (module-level: the ranks import the factory by name):
its load builds the whole sharded state dict and `dist_checkpointing.load` returns every value,
but only the model's are put back: the optimizer silently keeps its fresh (zero) Adam state."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.adapters.megatron_core import MegatronDistCkpt, cpu_shim, init_adam_state
from conformance.case import Case
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext


@dataclass(frozen=True)
class LeavesTheOptimizerOut(MegatronDistCkpt):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from megatron.core import dist_checkpointing

        init_adam_state(state.optim)
        with cpu_shim():
            loaded = dist_checkpointing.load(self.sharded(state), str(path))
        live = state.model.state_dict(keep_vars=True)
        for name, value in loaded["model"].items():
            live[name].data.copy_(value)


def leaves_the_optimizer_out(case: Case) -> MegatronDistCkpt:
    return LeavesTheOptimizerOut(case)

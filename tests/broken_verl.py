"""A broken variant of the verl row (module-level: the ranks import the factory by name): its
manager is built with verl's CheckpointConfig(load_contents=["model"]), a configuration verl
accepts (only "model" is required), so load_checkpoint loads the model and silently leaves the
optimizer, the LR scheduler and the RNG as freshly built."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.adapters.verl import VerlFsdp
from conformance.case import Case
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext


@dataclass(frozen=True)
class LoadsTheModelAlone(VerlFsdp):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from verl.trainer.config import CheckpointConfig
        from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

        manager = FSDPCheckpointManager(
            model=state.model,
            optimizer=state.optim,
            lr_scheduler=state.scheduler,
            checkpoint_config=CheckpointConfig(load_contents=["model"]),
        )
        manager.load_checkpoint(local_path=str(path), hdfs_path=None, del_local_after_load=False)


def loads_the_model_alone(case: Case) -> VerlFsdp:
    return LoadsTheModelAlone(case)

"""Lightning's Trainer with AsyncCheckpointIO (experimental in Lightning: a thread writes each
checkpoint while training goes on): the lifecycle row of conformance.adapters.lightning_trainer
with `Trainer(plugins=[AsyncCheckpointIO()])`, as its docs configure it, and a save killed in
flight.

AsyncCheckpointIO clones the checkpoint on the training thread and hands it to one writer thread
(a ThreadPoolExecutor of one worker), which saves it through the default TorchCheckpointIO (an
atomic write: into a temporary file, then moved into place). ModelCheckpoint prunes at once, while
the save it made may still be queued. The Trainer's teardown waits for the writer, so a save still
in flight when every rank is killed can only be met inside `fit`: the harness kills the ranks in
its after-save hook of the last step (the LightningModule's on_train_batch_end, after
ModelCheckpoint handed that step's file and `last.ckpt` to the writer). The restart is the
synchronous row's: a new Trainer's `fit(ckpt_path="last")`, max_steps=0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.adapters.lightning_trainer import TRAINER_DDP, TrainerDdp, TrainerRun
from conformance.strategy.lifecycle import Policy
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.world import RankContext


def drain(io: Any) -> None:
    """Wait for every write handed to an AsyncCheckpointIO: a no-op queued after them on its one
    writer thread (none before its first save)."""
    if io._executor is not None:
        io._executor.submit(lambda: None).result()


class AsyncTrainerRun(TrainerRun):
    def plugins(self) -> list[Any]:
        from lightning.pytorch.plugins.io import AsyncCheckpointIO

        return [AsyncCheckpointIO()]


@dataclass(frozen=True)
class AsyncTrainerDdp(TrainerDdp):
    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> TrainerRun:
        return AsyncTrainerRun(self.case, state, path, policy, ctx)


TRAINER_DDP_ASYNC = RegisteredStrategy(
    name="lightning_trainer_async",
    factory=AsyncTrainerDdp,
    supports=Supports(
        wrappers=(),
        layouts=TRAINER_DDP.supports.layouts,
        kinds=TRAINER_DDP.supports.kinds,
        checks=("lifecycle",),
        models=TRAINER_DDP.supports.models,
        precisions=("fp32",),
        # an interrupted save is the synchronous row's: here the commit the harness keeps before
        # step 2's save may still be in the writer's queue, so it is not the disk a cut-off leaves
        variants=(("lifecycle", ("keep_latest", "killed")),),
    ),
    storage="trainer",
    requires=("lightning",),
    imports=("lightning.pytorch",),
    description="lightning_trainer with Trainer(plugins=[AsyncCheckpointIO()]) (experimental in Lightning): "
    "each checkpoint written by one writer thread; every rank killed in flight after the last save",
)

"""The AsyncCheckpointIO Trainer row (conformance.adapters.lightning_trainer_async) on a slow
disk, so that the kill of the lifecycle check meets the last step's write: with this suite's small
models the writer thread finishes before the ranks are killed, and the killed cell then shows the
restart after a kill, not after a write cut off.

The slowing is this suite's, on purpose, and each row's description says so: each file is
written WRITE_S seconds late (a checkpoint of many GB on network storage takes that long and
more), and each training step first waits for the writes before it (a step that takes longer than
the disk). Then, when every rank is killed after step 2's save was handed to the writer, step 1 is
on disk and step 2 is not: the restart must resume step 1. The folder is made before the run, as
a run that goes on in its own folder has it. Two rows, the same but for `last`:

- `lightning_trainer_slow_disk`: `save_last=True`, a copy written after each step's file through
  the same atomic write: the old `last.ckpt` stays until the new one is in place.
- `lightning_trainer_slow_disk_link`: `save_last="link"`, which removes the old `last.ckpt` and
  links the name to the step's file at once (ModelCheckpoint._link_checkpoint), without waiting for
  the writer to have written it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.adapters.lightning_trainer import TrainerRun
from conformance.adapters.lightning_trainer_async import (
    TRAINER_DDP_ASYNC,
    AsyncTrainerDdp,
    AsyncTrainerRun,
    drain,
)
from conformance.strategy.lifecycle import Policy, SaveHooks, Training
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext

WRITE_S = 1.0  # each file's write this late: far longer than the kill takes after the last save


def _slow_disk() -> Any:
    """AsyncCheckpointIO over a TorchCheckpointIO that writes each file WRITE_S seconds late."""
    from lightning.pytorch.plugins.io import AsyncCheckpointIO, TorchCheckpointIO

    class SlowDisk(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
            time.sleep(WRITE_S)
            super().save_checkpoint(checkpoint, path, storage_options)

    return AsyncCheckpointIO(SlowDisk())


def _slower_training(io: Any) -> Any:
    """Each training step starts once the writes before it are done."""
    from lightning.pytorch.callbacks import Callback

    class SlowerThanTheDisk(Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            drain(io)

    return SlowerThanTheDisk()


class SlowDiskRun(AsyncTrainerRun):
    def __init__(self, *args: Any, save_last: bool | str) -> None:
        super().__init__(*args)
        self.save_last = save_last
        self.io = _slow_disk()

    def plugins(self) -> list[Any]:
        return [self.io]

    def callbacks(self) -> list[Any]:
        return [_slower_training(self.io)]

    def run(self, training: Training, hooks: SaveHooks) -> None:
        # the folder there before the first save, as a run that goes on in its own folder has it:
        # into a folder not made yet, the writer has not made it when "link" links the first
        # step's file, and os.symlink raises FileNotFoundError (fit dies at its first checkpoint)
        self.path.mkdir(parents=True, exist_ok=True)
        super().run(training, hooks)


@dataclass(frozen=True)
class SlowDiskTrainerDdp(AsyncTrainerDdp):
    save_last = True

    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> TrainerRun:
        return SlowDiskRun(self.case, state, path, policy, ctx, save_last=self.save_last)


@dataclass(frozen=True)
class SlowDiskLinkTrainerDdp(SlowDiskTrainerDdp):
    save_last = "link"  # type: ignore[assignment]


_KILLED = dataclasses.replace(
    TRAINER_DDP_ASYNC.supports, models=("mlp",), variants=(("lifecycle", ("killed",)),)
)
SLOWED = (
    f"each file written {WRITE_S:g} s late and each step waiting for the writes before it (this suite's "
    "slowing, on purpose: a slow disk, so that the kill meets step 2's write), the folder made before the run"
)
TRAINER_SLOW_DISK = dataclasses.replace(
    TRAINER_DDP_ASYNC,
    name="lightning_trainer_slow_disk",
    factory=SlowDiskTrainerDdp,
    supports=_KILLED,
    description=f"lightning_trainer_async (save_last=True) with {SLOWED}",
)
TRAINER_SLOW_DISK_LINK = dataclasses.replace(
    TRAINER_DDP_ASYNC,
    name="lightning_trainer_slow_disk_link",
    factory=SlowDiskLinkTrainerDdp,
    supports=_KILLED,
    description=f'lightning_trainer_async with ModelCheckpoint(save_last="link") and {SLOWED}',
)

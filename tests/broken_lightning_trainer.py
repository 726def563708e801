"""The Trainer lifecycle row (conformance.adapters.lightning_trainer) with one mistake each, of
the kind a user's ModelCheckpoint configuration makes; the lifecycle check must catch each:
- keeps_oldest: keep-latest-k with mode="min" on the monitored step, which keeps the oldest k
  (each later step ranks worse and is never written);
- no_last: save_last=False, so `fit(ckpt_path="last")` finds nothing to resume although every
  step's checkpoint is there;
- every_other_step: every_n_train_steps=2, so step 1 is never checkpointed;
- hooks_every_other_step: an adapter whose loop calls the harness's hooks after every other
  step only (the run is not the scenario's: the cell's error, never a pass);
- removes_last_first (the AsyncCheckpointIO row): the old `last.ckpt` removed when the new one is
  handed to the writer, as `save_last="link"` removes its link, and the new one written late (the
  writer slowed at the last step, so that the kill meets it): the kill leaves no `last.ckpt`,
  and the restart starts fresh although step 1 was complete.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.adapters.lightning_trainer import TRAINER_DDP, TrainerDdp, TrainerRun
from conformance.adapters.lightning_trainer_async import (
    TRAINER_DDP_ASYNC,
    AsyncTrainerDdp,
    AsyncTrainerRun,
    drain,
)
from conformance.case import Case
from conformance.strategy.lifecycle import Policy, SaveHooks, Training
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext

FLAWS = ("keeps_oldest", "no_last", "every_other_step", "hooks_every_other_step", "removes_last_first")
SLOW_FROM_STEP = 2  # the killed scenario's last save


class FlawedRun(TrainerRun):
    flaw = ""

    def checkpoint_options(self) -> dict[str, Any]:
        options = super().checkpoint_options()
        if self.flaw == "keeps_oldest" and options["monitor"]:
            options["mode"] = "min"
        elif self.flaw == "no_last":
            options["save_last"] = False
        elif self.flaw == "every_other_step":
            options["every_n_train_steps"] = 2
        return options

    def run(self, training: Training, hooks: SaveHooks) -> None:
        if self.flaw == "hooks_every_other_step":
            hooks = EveryOtherStep(hooks)
        super().run(training, hooks)


@dataclass(frozen=True)
class EveryOtherStep:
    hooks: SaveHooks

    def before_save(self, step: int) -> None:
        if step % 2 == 0:
            self.hooks.before_save(step)

    def after_save(self, step: int) -> None:
        self.hooks.after_save(step)


@dataclass(frozen=True)
class Flawed(TrainerDdp):
    flaw: str = ""

    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> TrainerRun:
        run = FlawedRun(self.case, state, path, policy, ctx)
        run.flaw = self.flaw
        return run


def keeps_oldest(case: Case) -> Flawed:
    return Flawed(case, "keeps_oldest")


def no_last(case: Case) -> Flawed:
    return Flawed(case, "no_last")


def every_other_step(case: Case) -> Flawed:
    return Flawed(case, "every_other_step")


def hooks_every_other_step(case: Case) -> Flawed:
    return Flawed(case, "hooks_every_other_step")


class RemovesLastFirstRun(AsyncTrainerRun):
    def plugins(self) -> list[Any]:
        from lightning.pytorch.plugins.io import AsyncCheckpointIO, TorchCheckpointIO

        class SlowLast(TorchCheckpointIO):
            def save_checkpoint(
                self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None
            ) -> None:
                if Path(path).name == "last.ckpt" and checkpoint.get("global_step", 0) >= SLOW_FROM_STEP:
                    time.sleep(10)
                super().save_checkpoint(checkpoint, path, storage_options)

        class RemovingFirst(AsyncCheckpointIO):
            def save_checkpoint(
                self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None
            ) -> None:
                if Path(path).name == "last.ckpt":
                    drain(self)  # the writes before it done: only this one late
                    Path(path).unlink(missing_ok=True)
                super().save_checkpoint(checkpoint, path, storage_options)

        return [RemovingFirst(SlowLast())]


@dataclass(frozen=True)
class RemovesLastFirst(AsyncTrainerDdp):
    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> TrainerRun:
        return RemovesLastFirstRun(self.case, state, path, policy, ctx)


def removes_last_first(case: Case) -> RemovesLastFirst:
    return RemovesLastFirst(case)


def flawed(flaw: str) -> Any:
    """The row with one mistake (its factory a module-level function: ranks import it by name)."""
    base = TRAINER_DDP_ASYNC if flaw == "removes_last_first" else TRAINER_DDP
    return dataclasses.replace(base, name=flaw, factory=globals()[flaw])

"""Lightning's Trainer and its ModelCheckpoint callback: a run's folder of checkpoints as
`Trainer.fit` keeps it (the lifecycle check; docs/proposals/lightning-lifecycle.md has the
reading of lightning 2.6 this follows, with file and line).

ModelCheckpoint saves and prunes only inside `Trainer.fit` (its hooks read the fit loop's
state), so the Trainer runs the loop (`Driving.run`): one `fit(module, batches)` per run, with
`max_steps` the run's steps and, as the docs configure it, `ModelCheckpoint(dirpath=...,
filename="{step}", every_n_train_steps=1, save_last=True)`: each step's checkpoint is
`step=<N>.ckpt`, then `last.ckpt` is written again. Keeping the latest k is the recipe of the
docs ("saves last-K checkpoints based on 'global_step' metric": `save_top_k=k,
monitor="global_step", mode="max"`, `self.log("global_step", self.global_step)` in
`training_step`); `monitor=None` refuses `save_top_k` > 1. Keeping all is `save_top_k=-1`. A
restart is a new Trainer whose `fit(..., ckpt_path="last")` restores the newest `last*.ckpt`
(model, optimizer, scheduler, loops) with `max_steps=0`, so that it trains nothing; it loaded
something when `trainer.ckpt_path` is set. A model-only save is `save_weights_only=True`, which
the callback applies to every save of the run (no option makes only the last one model-only).

The Trainer refuses FSDP without CUDA; its DDPStrategy runs on the CPU inside the world's
process group (the cluster environment of conformance.adapters.lightning_env), and `fit` wraps
the LightningModule in DDP itself: the row brings its own data-parallel layout. The harness's
optimizer and scheduler are what `configure_optimizers` returns (the scheduler stepped every
step), its batches the training data (`use_distributed_sampler=False`: each rank its own).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from conformance.adapters.lightning import as_lightning_module
from conformance.adapters.lightning_env import existing_group_environment
from conformance.case import Case
from conformance.strategy.lifecycle import Policy, SaveHooks, Training
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.training import batch_of
from conformance.world import RankContext

LAYOUT = ("lightning_ddp", "replicate")
KEEP_ALL = -1  # ModelCheckpoint's save_top_k that keeps every checkpoint


@dataclass
class Binding:
    """What the LightningModule's hooks of one run read: the harness's optimizer and scheduler,
    the run's training (None on a restart) and hooks, whether it logs the monitored step."""

    state: TrainState
    training: Training | None = None
    hooks: SaveHooks | None = None
    logs_step: bool = False


def _training_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
    run: Binding = self._conformance_run
    x, y = batch
    loss = run.training.loss(self(x), y)  # type: ignore[union-attr]
    if run.logs_step:  # the docs' keep-latest-k recipe
        self.log("global_step", float(self.global_step))
    return loss


def _configure_optimizers(self: Any) -> Any:
    state = self._conformance_run.state
    if state.scheduler is None:
        return state.optim
    return {"optimizer": state.optim, "lr_scheduler": {"scheduler": state.scheduler, "interval": "step"}}


def _on_train_batch_end(self: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
    """The module's hook runs after every callback's, ModelCheckpoint's save and pruning included."""
    hooks = self._conformance_run.hooks
    if hooks is not None:
        hooks.after_save(self.trainer.global_step)


METHODS = {
    "training_step": _training_step,
    "configure_optimizers": _configure_optimizers,
    "on_train_batch_end": _on_train_batch_end,
}


def _before_save(hooks: SaveHooks) -> Any:
    """A callback whose batch-end hook runs before ModelCheckpoint's: the Trainer moves
    checkpoint callbacks after all others."""
    from lightning.pytorch.callbacks import Callback

    class BeforeSave(Callback):
        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int
        ) -> None:
            hooks.before_save(trainer.global_step)

    return BeforeSave()


@contextlib.contextmanager
def _threads_kept() -> Iterator[None]:
    """Lightning's DDP setup sets torch's thread count and OMP_NUM_THREADS where the variable is
    unset (fabric's _set_num_threads_if_needed): put back, so that no later cell of a warm world
    runs otherwise than in a fresh one."""
    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp


class TrainerRun:
    """One run's checkpoints as the Trainer keeps them (the lifecycle check's Checkpointer with
    `run`: the Trainer's loop trains and checkpoints)."""

    save_last: bool | str = True  # ModelCheckpoint's: a copy each step ("link": a symbolic link)

    def __init__(self, case: Case, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> None:
        self.case, self.state, self.path, self.policy, self.ctx = case, state, path, policy, ctx

    def checkpoint_options(self) -> dict[str, Any]:
        """ModelCheckpoint's arguments for the run's policy."""
        keep = self.policy.keep_latest
        return {
            "dirpath": str(self.path),
            "filename": "{step}",
            "every_n_train_steps": 1,
            "save_last": self.save_last,
            "save_top_k": keep or KEEP_ALL,
            "monitor": "global_step" if keep else None,
            "mode": "max",
            "save_weights_only": self.policy.model_only_last,
        }

    def _checkpoint(self) -> Any:
        from lightning.pytorch.callbacks import ModelCheckpoint

        return ModelCheckpoint(**self.checkpoint_options())

    def plugins(self) -> list[Any]:
        """The Trainer's plugins (none: its default, synchronous checkpoint IO)."""
        return []

    def callbacks(self) -> list[Any]:
        """More callbacks of the run's Trainer (none)."""
        return []

    def _fit(self, binding: Binding, batches: Any, max_steps: int, callbacks: list[Any], **fit: Any) -> Any:
        from lightning.pytorch import Trainer
        from lightning.pytorch.strategies import DDPStrategy

        module = self.state.model
        module._conformance_run = binding
        trainer = Trainer(
            accelerator="cuda" if self.ctx.device.type == "cuda" else "cpu",
            devices=self.ctx.world_size,
            num_nodes=1,
            strategy=DDPStrategy(
                cluster_environment=existing_group_environment(), process_group_backend=self.ctx.backend
            ),
            max_steps=max_steps,
            callbacks=callbacks,
            plugins=self.plugins(),
            default_root_dir=str(self.path),
            use_distributed_sampler=False,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        # the batches as they are, in order (batch_size=None: no collation into larger batches)
        loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False)
        with _threads_kept():
            trainer.fit(module, train_dataloaders=loader, **fit)
        return trainer

    def run(self, training: Training, hooks: SaveHooks) -> None:
        binding = Binding(self.state, training, hooks, logs_step=bool(self.policy.keep_latest))
        batches = list(training.batches)
        self._fit(
            binding, batches, len(batches), [*self.callbacks(), _before_save(hooks), self._checkpoint()]
        )

    def save(self, step: int, last: bool = False) -> None:
        raise NotImplementedError("the Trainer's loop saves: the harness calls run()")

    def resume(self) -> bool:
        batches = [batch_of(self.case, self.ctx, 0)]  # fit wants data; max_steps=0 trains none
        trainer = self._fit(Binding(self.state), batches, 0, [self._checkpoint()], ckpt_path="last")
        return trainer.ckpt_path is not None

    def close(self) -> None:
        pass  # fit has returned: its saves are written and pruned


@dataclass(frozen=True)
class TrainerDdp:
    """The model as a LightningModule (conformance.adapters.lightning.as_lightning_module) with
    the hooks a user writes; `fit` wraps it in DDP."""

    case: Case

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return as_lightning_module(model.to(ctx.device), METHODS)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        raise NotImplementedError("lightning_trainer declares the lifecycle check alone")

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        raise NotImplementedError("lightning_trainer declares the lifecycle check alone")

    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> TrainerRun:
        return TrainerRun(self.case, state, path, policy, ctx)

    def step_folder(self, path: Path, step: int) -> Path:
        return path / f"step={step}.ckpt"

    def commit_files(self, path: Path, step: int) -> list[Path]:
        """What a restart reads: `last.ckpt`, written again after each step's own file."""
        return [path / "last.ckpt"]

    def read_export(self, path: Path, step: int, policy: Policy) -> dict[str, Any]:
        """A weights-only checkpoint: the LightningModule's state dict under "state_dict"."""
        checkpoint = torch.load(self.step_folder(path, step), map_location="cpu", weights_only=True)
        return checkpoint["state_dict"]


TRAINER_DDP = RegisteredStrategy(
    name="lightning_trainer",
    factory=TrainerDdp,
    supports=Supports(
        wrappers=(),
        layouts=(LAYOUT,),
        kinds=("full",),  # rank 0 writes the whole state, one file a step
        checks=("lifecycle",),
        # DDP's find_unused_parameters=False (the Trainer's default) takes no idle parameter
        models=("mlp", "tied_transformer"),
        precisions=("fp32",),
        variants=(("lifecycle", ("empty_folder", "interrupted", "keep_latest", "model_only_last")),),
    ),
    storage="trainer",
    requires=("lightning",),
    imports=("lightning.pytorch",),
    description="lightning.pytorch.Trainer.fit with ModelCheckpoint(every_n_train_steps=1, save_last=True; "
    'keep the latest k: save_top_k=k, monitor="global_step", mode="max", as its docs write it) over DDPStrategy '
    'inside the world\'s process group; a restart is fit(ckpt_path="last") with max_steps=0',
)

"""The protocol's extension for a library that manages a run's checkpoints itself: a folder of
step checkpoints it saves into, prunes (keep the latest k) and resumes from ("the latest"), a
seed checkpoint it loads when its folder holds none, a model-only last save.

A strategy that has the methods of `Lifecycle` takes the lifecycle check's cells it declares
(`Supports.variants["lifecycle"]`). Its checkpointer is the library's own object (torchtitan's
CheckpointManager, ...) configured by the policy, over the live TrainState, with `path` as its
base folder; the harness calls it as the library's trainer does: `save(step)` after each
training step it checkpoints, `resume()` once at the start of a run, `close()` at its end.
Every call is code under test.

A library whose own loop trains and checkpoints (Lightning's Trainer: its ModelCheckpoint
saves and prunes only inside `Trainer.fit`) has `run(training, hooks)` on its checkpointer
(`Driving`) instead of being called step by step: it trains on the harness's batches and calls
the hooks around each checkpoint it makes, where the harness keeps the state the checkpoint must
give back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from conformance.strategy.protocol import TrainState


@dataclass(frozen=True)
class Policy:
    """How the library is configured for one run. keep_latest: the checkpoints it keeps (0:
    every one; its own default otherwise applies only where it has no "keep all"). seed: a
    checkpoint (a step folder of another run of the same library) to load at the start when its
    own folder holds none. model_only_last: the save with last=True writes the model alone, for
    export; export_hf: in Hugging Face's safetensors format (the library's own conversion, its
    state-dict adapter naming each tensor as the Hugging Face model does)."""

    keep_latest: int = 0
    seed: str = ""
    model_only_last: bool = False
    export_hf: bool = False


class Checkpointer(Protocol):
    """One run's checkpointing, as the library's trainer drives it."""

    def save(self, step: int, last: bool = False) -> None:
        """Checkpoint the live state after `step` training steps, as the library's trainer does
        (it may return with the write still in flight: an asynchronous save)."""
        ...

    def resume(self) -> bool:
        """Load what the library resumes from at the start of a run (the latest complete step,
        else the seed): whether it loaded anything. Raises where it refuses."""
        ...

    def close(self) -> None:
        """The end of the run: every write in flight durable, every pruning done."""
        ...


@dataclass(frozen=True)
class Training:
    """What a library that runs the training loop itself trains on: `batches[i]` is the
    (input, target) of step i + 1 on this rank (the harness's seeded batches), `loss(output,
    target)` the model's loss. It trains one optimizer step per batch, in order."""

    batches: Sequence[tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[Any, torch.Tensor], torch.Tensor]


class SaveHooks(Protocol):
    """The harness's side of a library-driven run; every rank calls each hook at the same step
    (they may be collectives). The hooks are the harness's code, not the library's."""

    def before_save(self, step: int) -> None:
        """After the optimizer step `step` (1-based), before the library writes its checkpoint."""
        ...

    def after_save(self, step: int) -> None:
        """After the checkpoint of `step` is written (or handed to an asynchronous writer) and
        whatever pruning it triggers is done."""
        ...


class Driving(Protocol):
    """A checkpointer whose library runs the loop (optional: `run` on the Checkpointer)."""

    def run(self, training: Training, hooks: SaveHooks) -> None:
        """Train len(training.batches) steps under the library's own loop, checkpointing after
        each step, as the run's policy configures it, calling the hooks around each save."""
        ...


class Lifecycle(Protocol):
    """The strategy's methods of this extension (RankContext: conformance.world)."""

    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: Any) -> Checkpointer: ...

    def step_folder(self, path: Path, step: int) -> Path:
        """Where the library writes the checkpoint of `step` under the base folder `path` (it
        need not exist): what the harness inspects (retention) and damages (an interrupted save)."""
        ...

    def commit_files(self, path: Path, step: int) -> list[Path]:
        """The files the library writes last to commit the save of `step` (DCP's `.metadata` in
        its folder; a `latest` file that names it): a save cut off before them leaves them as they
        were before it began, which is how the harness makes an interrupted save."""
        ...

    def read_export(self, path: Path, step: int, policy: Policy) -> dict[str, Any]:
        """The model state dict of the model-only save of `step` under the run's policy (its
        format: export_hf), read in one process (no process group) as export code would read it.
        Only a strategy that declares an exporting scenario (model_only_last, hf_last) needs it."""
        ...

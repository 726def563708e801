"""torch-checkpointing (package `torch_checkpointing`, Meta): one `CheckpointManager`,
`save(checkpoint_id, {...})` and `load(checkpoint_id, into={...})`, asynchronous by default.

Called as its docs tell a user to (torch_checkpointing 0.1.1, docs/ of its repository):
- tutorials.md: "manager.save(path, {"model": model.state_dict(), "optimizer":
  optimizer.state_dict(), "step": step})"; the load passes "model": model.state_dict() (restored
  in place) and "optimizer": None ("None loads the complete object-owned optimizer state"), then
  `optimizer.load_state_dict(restored["optimizer"])`; the in-place update runs as
  "with manager.lock(): optimizer.step()"; "close() waits for the final checkpoint to become
  durable".
- troubleshooting.md, "Save fails on a CPU-only host": `AsyncCheckpointSaverConfig(
  staging_config=CheckpointStagerConfig(use_pinned_memory=use_cuda,
  use_non_blocking_copy=use_cuda))`.
- distributed_and_resharding.md: resharding on load needs `ItemSpec(resharder=DefaultResharder())`
  per item, declared from the first save, and a load `into=` the live state of the new layout.
- storage.md: `LocalFileSystemStorageConfig(use_direct_io=...)`, "The backend attempts O_DIRECT
  and transparently falls back to buffered I/O when it is not available, so the same config
  works everywhere".

Three rows, each one configuration a user may run:
- torch_checkpointing: async, the CPU staging of troubleshooting.md where there is no CUDA, no
  resharder (the tutorial's items), `use_direct_io=False`: the documented knob, because the
  default O_DIRECT writes fail on ext4 and XFS (finding torch-checkpointing-direct-io-ext4, the
  row torch_checkpointing_direct_io shows it). While the save is in flight the adapter takes the
  next optimizer step's place: every floating-point tensor of the live state it handed over
  changes in place, inside `manager.lock()` as the tutorial wraps the step; then `close()`; then
  the live state is put back. The checkpoint must hold the state at the call, durable once
  `close()` returns; the load is a fresh manager, as after a restart.
- torch_checkpointing_reshard: the same with `DefaultResharder` on the model and the optimizer,
  the documented path to load across layouts and world sizes.
- torch_checkpointing_direct_io: the default storage (no storage_config), one witness cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from conformance.adapters import ADAPTER_MODELS
from conformance.case import Case, Transfer
from conformance.layout.registry import layout_of
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.dcp_async import tensors_in
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

DIST = "torch_checkpointing"
IMPORTS = ("torch_checkpointing", "torch_checkpointing.default_resharder")  # what its cells import
# the layouts it is given, wrapped by the suite's own FSDP2 and tensor-parallel code (the library
# has no parallelize code of its own): FSDP2, TP alone, FSDP2 + TP on every 2-D mesh
LAYOUTS: tuple[tuple[str, str], ...] = (("fsdp2", "shard"), ("tp", "tp"), ("fsdp2", "tp"))


@dataclass(frozen=True)
class TorchCheckpointing:
    """A CheckpointManager per save and per load. reshard: DefaultResharder on the model and the
    optimizer. direct_io: the storage's default (None) or False."""

    case: Case
    reshard: bool = False
    direct_io: bool | None = False

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return layout_of(self.case).build(self.case).wrap(model, ctx)

    def manager(self, saving: bool = True) -> Any:
        """The manager a training script builds; a load's (after a restart) the same with the
        synchronous saver (the saver is no part of a load; the async one starts a writer process)."""
        from torch_checkpointing import CheckpointManager, ItemSpec
        from torch_checkpointing.config import AsyncCheckpointSaverConfig, SyncCheckpointSaverConfig
        from torch_checkpointing.default_resharder import DefaultResharder
        from torch_checkpointing.staging import CheckpointStagerConfig
        from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig

        use_cuda = torch.cuda.is_available()
        save: Any = SyncCheckpointSaverConfig()
        if saving:
            staging = CheckpointStagerConfig(use_pinned_memory=use_cuda, use_non_blocking_copy=use_cuda)
            save = AsyncCheckpointSaverConfig(staging_config=staging)
        items = {}
        if self.reshard:
            items = {key: ItemSpec(resharder=DefaultResharder()) for key in ("model", "optimizer")}
        storage = None
        if self.direct_io is not None:
            storage = LocalFileSystemStorageConfig(use_direct_io=self.direct_io)
        return CheckpointManager(CheckpointManager.Config(items=items, save=save, storage_config=storage))

    def optimizer_state(self, state: TrainState) -> Any:
        """The tutorial's optimizer.state_dict(); to reshard, the optimizer's state by parameter
        name with DTensor values (get_optimizer_state_dict, as torchtitan hands it to a
        checkpointer): the resharder needs DTensors, and a load a live target of each."""
        if not self.reshard:
            return state.optim.state_dict()
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(state.model, state.optim)

    def payload(self, state: TrainState) -> dict[str, Any]:
        out: dict[str, Any] = {"model": state.model.state_dict(), "optimizer": self.optimizer_state(state)}
        if state.scheduler is not None:
            out["scheduler"] = state.scheduler.state_dict()
        return out

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        manager = self.manager()
        try:
            payload = self.payload(state)
            manager.save(str(path), payload)  # returns the write's future; close() awaits it
            self.train_on(manager, payload)
        finally:
            manager.close()

    def train_on(self, manager: Any, payload: dict[str, Any]) -> None:
        """The next optimizer step while the save is in flight, as the tutorial wraps it
        (`with manager.lock(): optimizer.step()`); close(), which awaits the write; then the
        live state put back for the rest of the check."""
        live = tensors_in(payload)
        with torch.no_grad():
            kept = [t.clone() for t in live]
            with manager.lock():
                for tensor in live:
                    tensor.add_(1.0)
            manager.close()
            for tensor, value in zip(live, kept, strict=True):
                tensor.copy_(value)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        manager = self.manager(saving=False)
        try:
            # the tutorial's "optimizer": None loads the item whole; a resharded one needs its target
            into: dict[str, Any] = {
                "model": state.model.state_dict(),
                "optimizer": self.optimizer_state(state) if self.reshard else None,
            }
            if state.scheduler is not None:
                into["scheduler"] = None
            restored = manager.load(str(path), into=into, strict=True)
        finally:
            manager.close()
        if self.reshard:
            from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

            set_optimizer_state_dict(state.model, state.optim, restored["optimizer"])
        else:
            state.optim.load_state_dict(restored["optimizer"])
        if state.scheduler is not None:
            state.scheduler.load_state_dict(restored["scheduler"])


def plain(case: Case) -> TorchCheckpointing:
    return TorchCheckpointing(case)


def resharding(case: Case) -> TorchCheckpointing:
    return TorchCheckpointing(case, reshard=True)


def default_storage(case: Case) -> TorchCheckpointing:
    return TorchCheckpointing(case, direct_io=None)


# The one multi-rank save of the resharding row that runs on the CPU: it shows why the others cannot.
RESHARD_CPU_WITNESS = "torch_checkpointing_reshard-fsdp2-sharded-torch_checkpointing-adamw-mlp-w2"
RESHARD_CPU_REASON = (
    "torch_checkpointing 0.1.1 gathers the sharding metadata of an item with a resharder on CUDA "
    'tensors (metadata_manager.py, device="cuda"): a save in several ranks with a resharder raises on '
    f"a CPU-only host (finding torch-checkpointing-reshard-needs-cuda, shown by {RESHARD_CPU_WITNESS}); "
    "these cells run on a GPU runner (nccl). A save in one rank gathers nothing and runs here"
)


def saving_ranks(cell: Case | Transfer) -> int:
    """How many ranks write the cell's checkpoint (a transfer's saving side)."""
    return cell.save.world_size if isinstance(cell, Transfer) else cell.world_size


def reshard_cpu_skip(cell: Case | Transfer, backend: str) -> str | None:
    """On gloo, the cells of the resharding row whose save runs in several ranks skip, saying
    why (the witness runs and shows it); a save in one rank runs."""
    if backend != "gloo" or cell.id == RESHARD_CPU_WITNESS or saving_ranks(cell) == 1:
        return None
    return RESHARD_CPU_REASON


# What a save writes under its checkpoint_id: each rank's items as torch.save files,
# model_<rank>.pt and optimizer_<rank>.pt (scheduler_<rank>.pt with a scheduler); no file says
# what the others hold, so there is no missing_metadata damage.
STORAGE = OwnFormat(
    "torch_checkpointing",
    data="*.pt",
    rank_file="*_{rank}.pt",
    damage=("flipped_bytes", "missing_shard", "other_model", "truncated"),
)

TORCH_CHECKPOINTING = RegisteredStrategy(
    name="torch_checkpointing",
    factory=plain,
    supports=Supports(
        wrappers=LAYOUTS,
        kinds=("sharded",),
        checks=("corrupt", "resume", "roundtrip"),
        models=ADAPTER_MODELS,
    ),
    storage=STORAGE,
    requires=(DIST,),
    imports=IMPORTS,
    description="torch_checkpointing.CheckpointManager async save (CPU staging as its troubleshooting.md "
    "says, use_direct_io=False) of model.state_dict() and optimizer.state_dict(), the next step taken "
    "under manager.lock() while it is in flight, close(); load into a fresh manager",
)
TORCH_CHECKPOINTING_RESHARD = RegisteredStrategy(
    name="torch_checkpointing_reshard",
    factory=resharding,
    supports=Supports(
        wrappers=LAYOUTS,
        kinds=("sharded",),
        checks=("resume", "roundtrip", "reshard", "relayout"),
        models=ADAPTER_MODELS,
    ),
    storage=STORAGE,
    requires=(DIST,),
    imports=IMPORTS,
    description="torch_checkpointing with DefaultResharder on the model and the optimizer "
    "(distributed_and_resharding.md): the documented load across layouts and world sizes; on the "
    f"CPU the saves in one rank and one witness cell ({RESHARD_CPU_WITNESS}) run, the other saves in "
    "several ranks skip saying why",
    skips_on=reshard_cpu_skip,
)
TORCH_CHECKPOINTING_DIRECT_IO = RegisteredStrategy(
    name="torch_checkpointing_direct_io",
    factory=default_storage,
    supports=Supports(
        wrappers=(("fsdp2", "shard"),),
        kinds=("sharded",),
        checks=("roundtrip",),
        world_sizes=(2,),
        optimizers=("adamw",),
        models=("mlp",),
    ),
    storage=STORAGE,
    requires=(DIST,),
    imports=IMPORTS,
    description="torch_checkpointing with its default storage (O_DIRECT writes), one witness cell",
)

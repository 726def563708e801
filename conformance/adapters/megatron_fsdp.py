"""Megatron-FSDP (megatron-fsdp 0.6.1), as its README shows it: `fully_shard_model(module,
fsdp_unit_modules=...)`, `fully_shard_optimizer(optimizer)` over the fully-sharded model's
parameters, then torch.distributed.checkpoint of `{"model": fsdp_model.state_dict(), "optimizer":
optimizer.state_dict()}` (its `preproc_state_dict_for_dcp_ckpt` hooks, on by default, prepare
both for DCP); a load is `dcp.load` into the fresh state's dicts, `fsdp_model.load_state_dict(...,
strict=False)` and `optimizer.load_state_dict(...)`, the README's lines.

It cannot run on a CPU build of torch, so on gloo every cell is a skip that says why:
- `MegatronFSDP.__init__` compares its device with `torch.device(f"cuda:{torch.cuda.current_device()}")`
  (megatron_fsdp.py 234) and makes two `torch.cuda.Stream()` (406-407), unconditionally: "Torch
  not compiled with CUDA enabled" (seen with megatron-core absent);
- beside megatron-core 0.16.1 (the megatron_dist_ckpt rows' pin), `fully_shard_model` takes
  megatron.core's DistributedDataParallelConfig, which has no field
  `fsdp_db_use_persist_buf_on_alloc_fail`: `TypeError: DistributedDataParallelConfig.__init__()
  got an unexpected keyword argument 'fsdp_db_use_persist_buf_on_alloc_fail'` (fully_shard.py 371),
  before anything needs CUDA. On a GPU runner with both installed this error is the library's.
Its cells on nccl are ready for a lent GPU and have never run (docs/versions.md lists them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from conformance.adapters import ADAPTER_MODELS
from conformance.case import Case, Transfer
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.world import RankContext

DIST = "megatron-fsdp"
CPU_REASON = (
    "Megatron-FSDP 0.6.1 needs CUDA: MegatronFSDP.__init__ calls torch.cuda.current_device() "
    "(megatron_fsdp.py 234) and torch.cuda.Stream() (406) unconditionally, 'Torch not compiled with "
    "CUDA enabled' on a CPU build; beside megatron-core 0.16.1 its fully_shard_model raises first, "
    "TypeError: DistributedDataParallelConfig.__init__() got an unexpected keyword argument "
    "'fsdp_db_use_persist_buf_on_alloc_fail' (fully_shard.py 371). Its cells run on a GPU runner (nccl)"
)


def cpu_skip(cell: Case | Transfer, backend: str) -> str | None:
    """Every cell on gloo is a skip naming why; on nccl they run."""
    return CPU_REASON if backend == "gloo" else None


@dataclass(frozen=True)
class MegatronFsdp:
    """The README's fully_shard_model / fully_shard_optimizer and its DCP save and load."""

    case: Case

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from megatron_fsdp import fully_shard_model

        units = getattr(model, "wrap_units", None) or (nn.Linear,)
        return fully_shard_model(module=model.to(ctx.device), fsdp_unit_modules=list(units))

    def own_training(self, state: TrainState, ctx: RankContext) -> TrainState:
        from megatron_fsdp import fully_shard_optimizer

        optimizer = fully_shard_optimizer(optimizer=state.optim)  # the cell's optimizer, its hooks added
        return TrainState(state.model, optimizer, state.scheduler, holders=(optimizer,))

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        import torch.distributed.checkpoint as dcp

        payload = {"model": state.model.state_dict(), "optimizer": state.optim.state_dict()}
        if state.scheduler is not None:
            payload["scheduler"] = state.scheduler.state_dict()
        dcp.save(payload, checkpoint_id=str(path))

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        import torch.distributed.checkpoint as dcp

        ckpt = {"model": state.model.state_dict(), "optimizer": state.optim.state_dict()}
        if state.scheduler is not None:
            ckpt["scheduler"] = state.scheduler.state_dict()
        dcp.load(state_dict=ckpt, checkpoint_id=str(path))
        state.model.load_state_dict(ckpt["model"], strict=False)
        state.optim.load_state_dict(ckpt["optimizer"])
        if state.scheduler is not None:
            state.scheduler.load_state_dict(ckpt["scheduler"])


MEGATRON_FSDP = RegisteredStrategy(
    name="megatron_fsdp",
    factory=MegatronFsdp,
    supports=Supports(
        wrappers=(),
        layouts=(("megatron_fsdp", "zero3"),),  # its own layout: the cells the matrix gives DDP
        kinds=("sharded",),
        checks=("reshard", "resume", "roundtrip"),
        models=ADAPTER_MODELS,
    ),
    storage="dcp",
    requires=(DIST,),
    imports=("megatron_fsdp",),
    description="Megatron-FSDP fully_shard_model + fully_shard_optimizer, torch DCP save/load of "
    "model.state_dict() and optimizer.state_dict() as its README shows; on gloo every cell skips: "
    + CPU_REASON,
    skips_on=cpu_skip,
)

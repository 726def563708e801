"""Wrappers: DDP, FSDP1 (FullyShardedDataParallel) and FSDP2 (fully_shard)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from conformance.world import RankContext


@dataclass(frozen=True)
class DdpWrapper:
    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = model.to(ctx.device)
        return DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)


@dataclass(frozen=True)
class Fsdp1Wrapper:
    """FSDP1 with every Linear wrapped as its own unit under the root."""

    sharding: str  # a ShardingStrategy name, lower case
    use_orig_params: bool = False

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        return FSDP(
            model,
            sharding_strategy=ShardingStrategy[self.sharding.upper()],
            auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
            device_id=ctx.device,
            use_orig_params=self.use_orig_params,
        )


def fully_shard_fn():  # type: ignore[no-untyped-def]
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard  # torch 2.4, 2.5
    return fully_shard


@dataclass(frozen=True)
class Fsdp2Wrapper:
    """FSDP2: fully_shard on every Linear, then on the root, over a 1-D mesh of all ranks."""

    reshard_after_forward: bool = True

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh

        fully_shard = fully_shard_fn()
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        model = model.to(ctx.device)
        for module in model.modules():
            if isinstance(module, nn.Linear):
                fully_shard(module, mesh=mesh, reshard_after_forward=self.reshard_after_forward)
        fully_shard(model, mesh=mesh, reshard_after_forward=self.reshard_after_forward)
        return model


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside a DDP wrapper (FSDP1/FSDP2 state dicts are taken on the wrapper)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model

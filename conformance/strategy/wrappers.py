"""Wrappers: DDP, FSDP1 (FullyShardedDataParallel) and FSDP2 (fully_shard), and HSDP of both.

Each model class names its wrap units (`wrap_units`): the modules FSDP wraps on their own
under the root (Linear layers of the MLP; encoder layers of the transformer, so that tied
embeddings stay in the root's unit).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from conformance.world import RankContext

HYBRID = ("hybrid_shard", "hybrid_shard_zero2", "hsdp")


def hsdp_mesh(ctx: RankContext):  # type: ignore[no-untyped-def]
    """A (replicate, shard) mesh: 2 replicas of world_size // 2 shards each."""
    from torch.distributed.device_mesh import init_device_mesh

    if ctx.world_size < 4 or ctx.world_size % 2:
        raise ValueError(f"HSDP needs an even world of at least 4 ranks, got {ctx.world_size}")
    return init_device_mesh(ctx.device.type, (2, ctx.world_size // 2), mesh_dim_names=("replicate", "shard"))


def shard_group_size(sharding: str, world_size: int) -> int:
    """Over how many ranks one copy of the parameters is spread (1: replicated)."""
    if sharding in ("replicate", "no_shard"):
        return 1
    if sharding in HYBRID:
        return world_size // 2
    return world_size


@dataclass(frozen=True)
class DdpWrapper:
    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = model.to(ctx.device)
        return DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)


def fsdp1_sharding_strategy(name: str):  # type: ignore[no-untyped-def]
    """The ShardingStrategy for an axis value; hybrid_shard_zero2 is torch's _HYBRID_SHARD_ZERO2."""
    from torch.distributed.fsdp import ShardingStrategy

    members = {m.name.lstrip("_").lower(): m for m in ShardingStrategy}
    try:
        return members[name]
    except KeyError:
        raise ValueError(f"unknown FSDP1 sharding {name!r}; this torch has {sorted(members)}") from None


@dataclass(frozen=True)
class Fsdp1Wrapper:
    """FSDP1 with the model's wrap units wrapped on their own under the root."""

    sharding: str  # a ShardingStrategy name, lower case
    use_orig_params: bool = False
    bf16: bool = False

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if self.bf16 else None
        return FSDP(
            model,
            sharding_strategy=fsdp1_sharding_strategy(self.sharding),
            auto_wrap_policy=ModuleWrapPolicy(set(getattr(model, "wrap_units", (nn.Linear,)))),
            device_id=ctx.device,
            device_mesh=hsdp_mesh(ctx) if self.sharding in HYBRID else None,
            use_orig_params=self.use_orig_params,
            mixed_precision=mp,
        )


def fully_shard_fn():  # type: ignore[no-untyped-def]
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard  # torch 2.4, 2.5
    return fully_shard


def mixed_precision_policy_cls():  # type: ignore[no-untyped-def]
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy
    return MixedPrecisionPolicy


@dataclass(frozen=True)
class Fsdp2Wrapper:
    """FSDP2: fully_shard on every wrap unit, then on the root; 1-D mesh, or 2-D for HSDP."""

    hsdp: bool = False
    reshard_after_forward: bool = True
    bf16: bool = False

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh

        fully_shard = fully_shard_fn()
        mesh = hsdp_mesh(ctx) if self.hsdp else init_device_mesh(ctx.device.type, (ctx.world_size,))
        kwargs: dict[str, object] = {"mesh": mesh, "reshard_after_forward": self.reshard_after_forward}
        if self.bf16:
            kwargs["mp_policy"] = mixed_precision_policy_cls()(
                param_dtype=torch.bfloat16, reduce_dtype=torch.float32
            )
        model = model.to(ctx.device)
        units = tuple(getattr(model, "wrap_units", (nn.Linear,)))
        for module in list(model.modules())[1:]:
            if isinstance(module, units):
                fully_shard(module, **kwargs)
        fully_shard(model, **kwargs)
        return model


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside a DDP wrapper (FSDP1/FSDP2 state dicts are taken on the wrapper)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model

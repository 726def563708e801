"""Wrappers: DDP, FSDP1 (FullyShardedDataParallel) and FSDP2 (fully_shard), and HSDP of both.

Each model class names its wrap units (`wrap_units`): the modules FSDP wraps on their own
under the root (Linear layers of the MLP; encoder layers of the transformer, so that tied
embeddings stay in the root's unit). An expert-parallel model's experts (`experts`) are
wrapped first, each on its expert-data-parallel group, as users of expert parallelism do;
the root then shards the rest over the whole world.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from conformance.models import has_idle_parameters
from conformance.precision.base import Dtypes
from conformance.world import RankContext


def hsdp_mesh(ctx: RankContext, shape: tuple[int, int]):  # type: ignore[no-untyped-def]
    """A (replicate, shard) mesh of `shape`: ranks row by row, a row one copy's shards."""
    from torch.distributed.device_mesh import init_device_mesh

    if shape[0] * shape[1] != ctx.world_size:
        raise ValueError(f"an HSDP mesh of {shape[0]} x {shape[1]} does not fit {ctx.world_size} ranks")
    return init_device_mesh(ctx.device.type, shape, mesh_dim_names=("replicate", "shard"))


def local_experts(model: nn.Module) -> nn.ModuleDict | None:
    """The experts of an expert-parallel model (see training.ExpertParallelMoE), else None."""
    return model.experts if getattr(model, "expert_parallel", False) else None  # type: ignore[return-value]


def expert_ranks(world_size: int, experts: int) -> list[list[int]]:
    """Expert k lives on ranks k, k + E, k + 2E, ...: the expert-data-parallel groups."""
    return [list(range(k, world_size, experts)) for k in range(experts)]


def expert_group(ctx: RankContext, experts: int):  # type: ignore[no-untyped-def]
    """This rank's expert-data-parallel process group (every rank creates every group)."""
    import torch.distributed as dist

    groups = [dist.new_group(ranks) for ranks in expert_ranks(ctx.world_size, experts)]
    return groups[ctx.rank % experts]


def expert_mesh(ctx: RankContext, experts: int):  # type: ignore[no-untyped-def]
    """The same groups as a 1-D sub-mesh: dimension "edp" of an (edp, ep) mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(
        ctx.device.type, (ctx.world_size // experts, experts), mesh_dim_names=("edp", "ep")
    )
    return mesh["edp"]


def _experts_in(model: nn.Module, ctx: RankContext) -> int:
    return model.experts_in(ctx.world_size)  # type: ignore[operator]


@dataclass(frozen=True)
class PlainWrapper:
    """No wrapper: the plain module on every rank, each rank training alone (a consumer of
    checkpoints, e.g. for inference or export)."""

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return model.to(ctx.device)


@dataclass(frozen=True)
class DdpWrapper:
    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = model.to(ctx.device)
        return DDP(
            model,
            device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            find_unused_parameters=has_idle_parameters(model),
        )


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
    mixed: Dtypes | None = None  # MixedPrecision's keyword arguments (Precision.fsdp1)
    sync_module_states: bool = False  # broadcast rank 0's weights while wrapping
    hsdp_shape: tuple[int, int] | None = None  # HYBRID_SHARD*'s (replicate, shard) mesh

    def wrap(self, model: nn.Module, ctx: RankContext, device_mesh: Any = None) -> nn.Module:
        """device_mesh: the data-parallel mesh to shard over (FSDP1 over tensor parallelism);
        by default the HSDP mesh of hsdp_shape, else every rank."""
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        mp = MixedPrecision(**dict(self.mixed)) if self.mixed is not None else None
        common = {
            "sharding_strategy": fsdp1_sharding_strategy(self.sharding),
            "device_id": ctx.device,
            "use_orig_params": self.use_orig_params,
            "mixed_precision": mp,
            "sync_module_states": self.sync_module_states,
        }
        experts = local_experts(model)
        if experts is not None:
            if self.hsdp_shape:
                raise ValueError("expert parallelism with FSDP1 HSDP is not built")
            group = expert_group(ctx, _experts_in(model, ctx))
            for name in list(experts):
                experts[name] = FSDP(experts[name], process_group=group, **common)
            return FSDP(model, **common)  # auto-wrapping refuses already wrapped children
        return FSDP(
            model,
            auto_wrap_policy=ModuleWrapPolicy(set(getattr(model, "wrap_units", (nn.Linear,)))),
            device_mesh=device_mesh
            if device_mesh is not None
            else (hsdp_mesh(ctx, self.hsdp_shape) if self.hsdp_shape else None),
            **common,
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


def cpu_offload_policy_cls():  # type: ignore[no-untyped-def]
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy  # torch >= 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import CPUOffloadPolicy
    return CPUOffloadPolicy


@dataclass(frozen=True)
class Fsdp2Wrapper:
    """FSDP2: fully_shard on every wrap unit, then on the root; 1-D mesh, or 2-D for HSDP."""

    hsdp: bool = False
    reshard_after_forward: bool = True
    mixed: Dtypes | None = None  # MixedPrecisionPolicy's keyword arguments (Precision.fsdp2)
    hsdp_shape: tuple[int, int] = (2, 1)  # the 2-D mesh's (replicate, shard)
    cpu_offload: bool = False  # offload_policy=CPUOffloadPolicy(): parameters live on the CPU

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = (
            hsdp_mesh(ctx, self.hsdp_shape)
            if self.hsdp
            else init_device_mesh(ctx.device.type, (ctx.world_size,))
        )
        kwargs: dict[str, object] = {"reshard_after_forward": self.reshard_after_forward}
        if self.mixed is not None:
            kwargs["mp_policy"] = mixed_precision_policy_cls()(**dict(self.mixed))
        if self.cpu_offload:
            kwargs["offload_policy"] = cpu_offload_policy_cls()()
        if not any(p.is_meta for p in model.parameters()):  # a meta-device model stays there (to_empty later)
            model = model.to(ctx.device)
        if self.hsdp and local_experts(model) is not None:
            raise ValueError("expert parallelism with FSDP2 HSDP is not built")
        return fully_shard_model(model, mesh, ctx, **kwargs)


def fully_shard_model(model: nn.Module, mesh: Any, ctx: RankContext, **kwargs: object) -> nn.Module:
    """fully_shard as the suite applies it, for the built-in FSDP2 wrapper and the adapters'
    parallelize functions alike: an expert-parallel model's experts on their
    expert-data-parallel sub-mesh, then the model's wrap units (every Linear unless the model
    names others), then the root, on `mesh`. kwargs: fully_shard's other options."""
    fully_shard = fully_shard_fn()
    experts = local_experts(model)
    if experts is not None:
        sub_mesh = expert_mesh(ctx, _experts_in(model, ctx))
        for expert in experts.values():
            fully_shard(expert, mesh=sub_mesh, **kwargs)
    units = tuple(getattr(model, "wrap_units", (nn.Linear,)))
    for module in list(model.modules())[1:]:
        if isinstance(module, units):
            fully_shard(module, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside a DDP wrapper (FSDP1/FSDP2 state dicts are taken on the wrapper)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model

"""Tensor parallelism, alone and composed with FSDP2 on 2-D and 3-D device meshes, as
torchtitan applies it: `parallelize_module` with the model's plan (its `tp_plan()`: module
name -> ColwiseParallel / RowwiseParallel) on the mesh dimension named "tp", then
`fully_shard` (the model's wrap units, then the root) on the data-parallel dimensions: "dp" of
a (dp, tp) mesh, or the (dp_replicate, dp_shard) sub-mesh of a 3-D one (HSDP + TP).

The sanity check finds a tensor-parallel weight by its mesh dimension's name, "tp": a
strategy of your own that claims these layouts names its dimension so too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from conformance.strategy.wrappers import Fsdp1Wrapper, fully_shard_model
from conformance.world import RankContext

TP_DIM = "tp"
MESH_DIMS: dict[int, tuple[str, ...]] = {
    1: (TP_DIM,),
    2: ("dp", TP_DIM),
    3: ("dp_replicate", "dp_shard", TP_DIM),
}


def parallel_mesh(ctx: RankContext, shape: tuple[int, ...]) -> Any:
    """A mesh of `shape` with the dimension names of MESH_DIMS, ranks row by row."""
    from torch.distributed.device_mesh import init_device_mesh

    size = 1
    for d in shape:
        size *= d
    if size != ctx.world_size or len(shape) not in MESH_DIMS:
        raise ValueError(f"a mesh of {shape} does not fit {ctx.world_size} ranks")
    return init_device_mesh(ctx.device.type, shape, mesh_dim_names=MESH_DIMS[len(shape)])


def tensor_parallel(model: nn.Module, tp_mesh: Any) -> nn.Module:
    """The model's own plan (tp_plan) applied on the tp mesh, as parallelize_module documents."""
    from torch.distributed.tensor.parallel import parallelize_module

    plan = getattr(model, "tp_plan", None)
    if plan is None:
        raise ValueError(f"{type(model).__name__} has no tensor-parallel plan (tp_plan)")
    return parallelize_module(model, tp_mesh, plan())


@dataclass(frozen=True)
class TpWrapper:
    """Tensor parallelism alone over every rank (a 1-D mesh named "tp")."""

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        mesh = parallel_mesh(ctx, (ctx.world_size,))
        return tensor_parallel(model.to(ctx.device), mesh)


@dataclass(frozen=True)
class Fsdp2TpWrapper:
    """FSDP2 over tensor parallelism: mesh (dp, tp), or (dp_replicate, dp_shard, tp) for HSDP."""

    mesh_shape: tuple[int, ...]

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        mesh = parallel_mesh(ctx, self.mesh_shape)
        model = tensor_parallel(model.to(ctx.device), mesh[TP_DIM])
        dp = mesh[MESH_DIMS[len(self.mesh_shape)][:-1]]
        return fully_shard_model(model, dp, ctx)


@dataclass(frozen=True)
class Fsdp1TpWrapper:
    """FSDP1 over tensor parallelism on a (dp, tp) mesh, as PyTorch's 2-D FSDP1 tests build it:
    the model's plan on "tp", then FullyShardedDataParallel with `device_mesh` the "dp"
    dimension (the wrapper's options, e.g. use_orig_params, as `fsdp`'s)."""

    mesh_shape: tuple[int, int]
    fsdp: Fsdp1Wrapper

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        mesh = parallel_mesh(ctx, self.mesh_shape)
        model = tensor_parallel(model.to(ctx.device), mesh[TP_DIM])
        return self.fsdp.wrap(model, ctx, device_mesh=mesh["dp"])


@dataclass(frozen=True)
class Fsdp2EpWrapper:
    """Experts as DTensors (torchtitan's MoE layout) on a (dp, ep) mesh: the model's expert
    parameters (`ep_params()`) sharded on dim 0 over "ep", then fully_shard on "dp"; the
    rest of the model fully sharded over every rank (a 1-D mesh of the world)."""

    mesh_shape: tuple[int, int]

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        from conformance.strategy.wrappers import fully_shard_fn

        names = getattr(model, "ep_params", None)
        if names is None:
            raise ValueError(f"{type(model).__name__} declares no expert-parallel parameters (ep_params)")
        mesh = init_device_mesh(ctx.device.type, self.mesh_shape, mesh_dim_names=("dp", "ep"))
        model = model.to(ctx.device)
        for name in names():
            owner_name, _, attr = name.rpartition(".")
            owner = model.get_submodule(owner_name)
            value = getattr(owner, attr)
            setattr(owner, attr, nn.Parameter(distribute_tensor(value.data, mesh["ep"], [Shard(0)])))
        fully_shard = fully_shard_fn()
        for owner_name in sorted({n.rpartition(".")[0] for n in names()}):
            fully_shard(model.get_submodule(owner_name), mesh=mesh["dp"])
        fully_shard(model, mesh=init_device_mesh(ctx.device.type, (ctx.world_size,)))
        return model

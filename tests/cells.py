"""Cell functions that misbehave on purpose, to show the world reports each failure mode."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import torch
import torch.distributed as dist

from conformance.world import RankContext


def ok(ctx: RankContext, arg: Any) -> dict[str, Any]:
    t = torch.tensor([float(ctx.rank)])
    dist.all_reduce(t)
    return {"rank": ctx.rank, "sum": t.item(), "seed": ctx.seed, "arg": arg}


def exit_on_rank1(ctx: RankContext, arg: Any) -> None:
    if ctx.rank == 1:
        os._exit(3)
    dist.barrier()


def segfault_on_rank1(ctx: RankContext, arg: Any) -> None:
    if ctx.rank == 1:
        ctypes.string_at(0)  # a real SIGSEGV
    dist.barrier()


def skip_collective_on_rank1(ctx: RankContext, arg: Any) -> None:
    if ctx.rank != 1:
        dist.barrier()  # rank 1 never joins: rank 0 waits forever
    else:
        time.sleep(3600)


def hang_unless_first_cell(ctx: RankContext, arg: Any) -> dict[str, Any]:
    """Hangs in a world that ran cells before this one (its cell directory is not cell1), as a
    cell would that some leftover of an earlier cell deadlocks; passes in a fresh world."""
    if ctx.cell_dir.name != "cell1":
        skip_collective_on_rank1(ctx, arg)
    return ok(ctx, arg)


def raise_on_rank1(ctx: RankContext, arg: Any) -> None:
    if ctx.rank == 1:
        time.sleep(0.2)
        raise ValueError("rank one broke on purpose")
    dist.barrier()  # rank 0 waits for rank 1, then fails on its own


def leak_state(ctx: RankContext, arg: Any) -> dict[str, Any]:
    """Changes every global a cell could change; the next cell must not see any of it."""
    seen = {
        "rand": torch.rand(1).item(),
        "grad": torch.is_grad_enabled(),
        "dtype": str(torch.get_default_dtype()),
        "groups": len(dist.distributed_c10d._world.pg_map),
        "cwd": os.getcwd(),
    }
    torch.manual_seed(12345)
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    dist.new_group(list(range(ctx.world_size)))
    os.chdir(str(ctx.cell_dir))
    return seen


def unpicklable(ctx: RankContext, arg: Any) -> Any:
    return lambda: None


class Unimportable:
    """Pickles by reference to a module the ranks cannot import."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (__import__, ("no_such_module_anywhere",))


def mesh_op(ctx: RankContext, arg: Any) -> dict[str, Any]:
    """A 2-D mesh and one DTensor op: run twice, the second cell must not get the first's
    mesh back from DTensor's caches (DeviceMesh equality ignores process groups)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2, ctx.world_size // 2))
    doubled = distribute_tensor(torch.arange(8.0).reshape(4, 2), mesh, [Replicate(), Shard(0)]) * 2
    return {"same_mesh": doubled.device_mesh is mesh, "sum": doubled.full_tensor().sum().item()}

"""Cell functions that misbehave on purpose, to show the world reports each failure mode."""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from typing import Any

import torch
import torch.distributed as dist

from conformance.world import RankContext
from conformance.world.attribution import code_under_test


def cuda_usable_after_fork(ctx: RankContext, arg: Any) -> bool:
    """Whether this forked rank may still initialise CUDA (False: its template initialised it)."""
    return not torch.cuda._is_in_bad_fork()


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
    """Rank 1's code under test raises (arg: True), or the harness's own code does (False)."""
    if ctx.rank == 1:
        time.sleep(0.2)
        with code_under_test("strategy.load") if arg else contextlib.nullcontext():
            raise ValueError("rank one broke on purpose")
    with code_under_test("strategy.load"):
        dist.barrier()  # rank 0 waits for rank 1, then fails on its own (later: not the cause)


def leak_state(ctx: RankContext, arg: Any) -> dict[str, Any]:
    """Changes every global a cell could change; the next cell must not see any of it."""
    seen = {
        "rand": torch.rand(1).item(),
        "grad": torch.is_grad_enabled(),
        "dtype": str(torch.get_default_dtype()),
        "groups": len(dist.distributed_c10d._world.pg_map),
        # named as in a fresh process: a DeviceMesh unpickled from a checkpoint finds its
        # groups by these names
        "first_group_name": dist.new_group(list(range(ctx.world_size))).group_name,
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


def save_dtensor(ctx: RankContext, directory: str) -> None:
    """A DTensor on a mesh over a group of its own (as FSDP2's world mesh is where CUDA is
    available and the backend is gloo), saved per rank with torch.save: its DeviceMesh pickles
    the group's name."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = DeviceMesh.from_group(dist.new_group(list(range(ctx.world_size))), "cpu")
    tensor = distribute_tensor(torch.arange(4.0), mesh, [Shard(0)])
    torch.save(tensor, f"{directory}/rank{ctx.rank}.pt")


def load_dtensor(ctx: RankContext, directory: str) -> list[float]:
    """Another cell: its own mesh group first (as a fresh model's wrapping makes one), then the
    saved DTensor, gathered through the group its mesh names."""
    dist.new_group(list(range(ctx.world_size)))
    tensor = torch.load(f"{directory}/rank{ctx.rank}.pt", weights_only=False)
    return tensor.full_tensor().tolist()


def environment(ctx: RankContext, name: str) -> dict[str, Any]:
    """What a rank sees of the world's process: an environment variable, its import path."""
    import os
    import sys

    return {"value": os.environ.get(name), "path": list(sys.path), "pid": os.getpid()}


def poison_group_creation(ctx: RankContext, arg: Any) -> None:
    """Rank 1's next process group creation kills it, then the cell errors: the world's next
    cell asks for a fresh group, which rank 1 dies making, before that cell begins."""
    if ctx.rank == 1:
        dist.init_process_group = lambda *args, **kwargs: os._exit(5)  # type: ignore[assignment]
    with code_under_test("strategy.load"):
        raise ValueError("an error, so the next cell gets a fresh process group")

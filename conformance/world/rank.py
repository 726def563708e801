"""The loop every rank of a world runs: take a cell, run it, send back its value or traceback.

A rank process lives for many cells. Between cells it resets what a cell may have changed:
seeds, sub-process-groups, grad mode, default dtype, working directory. After a cell in which
any rank raised, the parent asks for a fresh default process group, so that a collective left
half-done by one cell can never pair with one of the next.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import importlib
import os
import pickle
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from conformance.world.attribution import raised_in, trace_path, tracing
from conformance.world.devices import process_group_backend

CellFn = Callable[[Any, Any], Any]  # (RankContext, arg) -> picklable value

CELL_MARK = "--- cell in "  # what a rank prints as a cell begins (the world reads it)
# The world's message to the ranks that ended a cell while a peer is still inside it: tear down
# the default group, so that the peer's collective fails (the next cell gets a fresh group).
RELEASE = "release"


@dataclass(frozen=True)
class CellMessage:
    fn: CellFn
    arg: Any
    cell_dir: str
    seed: int
    fresh_group: bool  # re-create the default process group before the cell
    # run the cell with no process group, as a program of one process would (`one_process`)
    without_group: bool = False


def one_process(fn: CellFn) -> CellFn:
    """Mark a cell function to run as a program of one process runs: with torch.distributed
    not initialised (a world of one rank tears its default group down first; the next cell gets
    a fresh one), so that a library's offline tool that refuses inside a process group can be
    called as its documentation says."""
    fn.one_process = True  # type: ignore[attr-defined]
    return fn


def runs_in_one_process(fn: CellFn) -> bool:
    return bool(getattr(fn, "one_process", False))


@dataclass(frozen=True)
class RankReply:
    rank: int
    ok: bool
    value: Any
    error: str  # formatted traceback when not ok
    error_type: str
    finished_at: float  # time.monotonic(), system-wide on Linux: orders errors across ranks
    raised_in: str = ""  # the call under test the error escaped from; "" for the harness's own

    @property
    def under_test(self) -> bool:
        """Whether the error is the code under test's (see conformance.world.attribution)."""
        return bool(self.raised_in)


def reset_globals(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)


def _clear_dtensor_caches() -> None:
    """DTensor caches sharding plans by DeviceMesh equality, which ignores the process groups:
    after a cell's groups are destroyed, a plan cached in it would hand the next cell's
    DTensors a mesh whose groups no longer exist. Clear every such cache this torch has."""
    import torch

    dispatcher = getattr(getattr(torch.distributed, "tensor", None), "DTensor", None)
    propagator = getattr(getattr(dispatcher, "_op_dispatcher", None), "sharding_propagator", None)
    holders = [propagator, type(propagator) if propagator is not None else None]
    try:
        from torch.distributed.tensor import _redistribute

        holders.append(_redistribute)
    except ImportError:
        pass
    for holder in holders:
        for name in dir(holder) if holder is not None else ():
            cached = getattr(holder, name, None)
            if not callable(getattr(cached, "cache_clear", None)):
                # torch 2.9's LocalLRUCache (the propagator's propagate_op_sharding, the op
                # cache DTensor dispatch reads first) has no cache_clear of its own (2.10 added
                # one): clear the functools.lru_cache it wraps
                cached = getattr(cached, "cache", None)
            if callable(getattr(cached, "cache_clear", None)):
                cached.cache_clear()
    native = getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", None)  # the C++ fast path's
    if native is not None:
        native()
    # torch <= 2.9 keeps a sliced mesh's root in dicts keyed by DeviceMesh equality, which ignores
    # the process groups too: a later cell's root mesh equal to an earlier cell's submesh would
    # find that cell's root (and its destroyed groups). 2.10 keeps the root on the mesh itself.
    from torch.distributed import device_mesh

    resources = getattr(device_mesh, "_mesh_resources", None)
    for name in ("child_to_root_mapping", "root_to_flatten_mapping", "flatten_name_to_root_dims"):
        mapping = getattr(resources, name, None)
        if isinstance(mapping, dict):
            mapping.clear()


def _destroy_subgroups() -> None:
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _world

    default = dist.group.WORLD
    for pg in list(_world.pg_map):
        if pg is not default:
            with contextlib.suppress(Exception):
                dist.destroy_process_group(pg)


@contextlib.contextmanager
def groups_as_in_a_fresh_process(tag: str) -> Iterator[None]:
    """The cell's process groups named as a fresh process names them, rendezvousing under keys
    of their own.

    torch names a group by a counter (`_world.group_count`) that only the default group's
    destruction resets, and a DeviceMesh pickled into a checkpoint (a DTensor saved with
    torch.save) finds its groups again by those names when it is loaded. Left alone, the names
    a warm world's cell got depended on the cells before it: a DTensor loaded there resolved a
    name no group had ("Could not resolve the process group registered under the name 7",
    torch 2.11), where a fresh world, naming its groups in the same order as the world that
    saved, found them. So the counter starts where a fresh process's does, after the default
    group. A name used again must not meet the last cell's rendezvous keys (a group's store is
    the default group's under the group's name; gloo would dial the dead group's addresses:
    "connectFullMesh failed ... Connection refused"), so the cell's groups get the default
    store under `tag`, a prefix unique to the cell and the same on every rank."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _world

    default = dist.group.WORLD if dist.is_initialized() else None
    if default is None:
        yield
        return
    backend, store = _world.pg_map[default]
    _world.pg_map[default] = (backend, dist.PrefixStore(f"{tag}/", store))
    _world.group_count = 1  # the default group took the first name ("0"), as in a fresh process
    try:
        yield
    finally:
        if dist.is_initialized() and dist.group.WORLD is default:
            _world.pg_map[default] = (backend, store)


def execute_cell(fn: CellFn, arg: Any, ctx: Any, *, release: bool = True) -> RankReply:
    """Run one cell function on this rank, then reset what a cell may have changed. When it
    raises, the traceback's frames (which hold the cell's models, which hold the group) are
    freed, and with `release` the default group is torn down at once: a peer blocked in a
    collective with this rank then fails instead of waiting for the timeout. Without it the
    group stays until the world sends RELEASE (conformance.world.world: a peer still inside the
    cell is first seen waiting, then freed). Whoever runs the next cell must give every rank a
    fresh default group first."""
    import torch.distributed as dist

    reset_globals(ctx.seed)
    cwd = os.getcwd()
    try:
        with groups_as_in_a_fresh_process(ctx.cell_dir.name), tracing(trace_path(ctx.cell_dir, ctx.rank)):
            value = fn(ctx, arg)
        reply = RankReply(ctx.rank, True, value, "", "", time.monotonic())
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        reply = RankReply(
            ctx.rank,
            False,
            None,
            traceback.format_exc(),
            type(exc).__name__,
            time.monotonic(),
            raised_in(exc) or "",
        )
        traceback.clear_frames(exc.__traceback__)
        del exc
        gc.collect()
        if release and dist.is_initialized():
            dist.destroy_process_group()
    finally:
        os.chdir(cwd)
        _destroy_subgroups()
        _clear_dtensor_caches()
        gc.collect()
        gc.freeze()  # survivors (modules a cell imported, caches) are not the next cell's garbage
    return reply


def _init_default_group(
    store: Any, generation: int, rank: int, size: int, backend: str, timeout_s: float
) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group(
        process_group_backend(backend),
        store=dist.PrefixStore(f"pg{generation}", store),
        rank=rank,
        world_size=size,
        timeout=timedelta(seconds=timeout_s),
    )


def _reply(conn: Any, reply: RankReply) -> None:
    """Plain pickle both ways: the connection's own pickler would share tensors through file
    descriptors (torch.multiprocessing's reductions), which a socketpair cannot carry."""
    conn.send_bytes(pickle.dumps(reply))


def rank_main(rank: int, size: int, backend: str, store_path: str, conn: Any, pg_timeout_s: float) -> None:
    """Run by conformance._rank_entry, in its own session, output to its log file."""
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns interrupts and kills us
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(size))
    paths, preload = conn.recv()
    sys.path[:] = paths  # the parent's import path: cell functions are pickled by reference

    import torch
    import torch.distributed as dist

    from conformance.world.context import RankContext

    torch.set_num_threads(1)
    if backend == "nccl":
        device = torch.device("cuda", rank % max(torch.cuda.device_count(), 1))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    store = dist.FileStore(store_path, size)
    generation = 0
    _init_default_group(store, generation, rank, size, backend, pg_timeout_s)
    for module in preload:  # the usual cells' imports, once, before the freeze
        importlib.import_module(module)

    # Everything imported so far lives as long as the rank: move it out of the collector's
    # sight, so the gc.collect() after each cell scans only what cells made (torch's import
    # graph otherwise costs ~100 ms a collection).
    gc.collect()
    gc.freeze()
    conn.send(("ready", rank, os.getpid()))

    while True:
        try:
            raw = conn.recv_bytes()
        except EOFError:
            break
        try:
            msg = pickle.loads(raw)
        except Exception:  # a cell that cannot be imported here is an error of that cell
            _reply(
                conn,
                RankReply(rank, False, None, traceback.format_exc(), "UnpicklingError", time.monotonic()),
            )
            continue
        if msg is None:
            break
        if msg == RELEASE:  # a peer is still inside the last cell: let go of the group it waits in
            if dist.is_initialized():
                dist.destroy_process_group()
            continue
        if msg.fresh_group:
            generation += 1
            _init_default_group(store, generation, rank, size, backend, pg_timeout_s)
        if msg.without_group and dist.is_initialized():
            dist.destroy_process_group()
        ctx = RankContext(rank, size, backend, device, Path(msg.cell_dir), msg.seed)
        print(f"{CELL_MARK}{msg.cell_dir}", flush=True)
        reply = execute_cell(msg.fn, msg.arg, ctx, release=False)
        try:
            _reply(conn, reply)
        except Exception as exc:  # an unpicklable value is an error of the cell, not of the world
            _reply(
                conn,
                RankReply(
                    rank,
                    False,
                    None,
                    f"cell value could not be sent: {exc!r}",
                    "PicklingError",
                    time.monotonic(),
                ),
            )

    if dist.is_initialized():
        dist.destroy_process_group()


def main(argv: list[str]) -> None:
    """Entry of a rank (after conformance._rank_entry): RANK SIZE BACKEND STORE FD PG_TIMEOUT_S."""
    from multiprocessing.connection import Connection

    rank, size, backend, store_path, fd, pg_timeout_s = argv
    rank_main(int(rank), int(size), backend, store_path, Connection(int(fd)), float(pg_timeout_s))

"""Where DeepSpeed's cells run (conformance/adapters/deepspeed.py): its CPU accelerator on a
world without a GPU, a warm world's cells as in fresh processes, and which cells this host
cannot run (no prebuilt shared-memory op; fp16 on a CPU without oneDNN's fp16 kernels)."""

from __future__ import annotations

import os

import torch

from conformance.adapters import deepspeed_autotp as autotp
from conformance.case import Case, Transfer
from conformance.precision.registry import precision_of
from conformance.world import RankContext

DIST = "deepspeed"


def use_cpu_accelerator(ctx: RankContext) -> None:
    if ctx.device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def as_in_a_fresh_process() -> None:
    """DeepSpeed caches the clone of the world group it makes at the first initialize
    (deepspeed.utils.groups). A warm world destroys each cell's groups with torch.distributed,
    which DeepSpeed does not see (its own deepspeed.comm.destroy_process_group drops its
    references): a later cell's initialize would broadcast over a destroyed group ("Group ...
    is not registered"). When a cached group (the world's clone, AutoTP's tensor-, model- and
    data-parallel groups) is no longer torch's, drop DeepSpeed's references as its
    destroy_process_group does, so that every cell starts as in a new process; AutoTP's
    process-wide mode is reset as DeepSpeed's own AutoTP tests reset it between engines."""
    from deepspeed.utils import groups
    from torch.distributed.distributed_c10d import _world

    cached = (groups._WORLD_GROUP, *autotp.cached_groups(groups))
    if any(group is not None and group not in _world.pg_map for group in cached):
        groups._release_process_group_references(None)
    autotp.reset_mode()


FP16_CPU_REASON = (
    "DeepSpeed's CPU accelerator takes its fp16 mode only where oneDNN has fp16 kernels "
    "(CPU_Accelerator.is_fp16_supported: torch.ops.mkldnn._is_mkldnn_fp16_supported()), which this CPU "
    "lacks: deepspeed.initialize refuses ('Type fp16 is not supported on your device'); these cells run "
    "on a CPU with AVX512-FP16 or AMX-FP16, or on a GPU runner (nccl)"
)


def skips_on(cell: Case | Transfer, backend: str) -> str | None:
    """Without its prebuilt shared-memory op, DeepSpeed compiles one in the first cell's world;
    its fp16 mode on a CPU needs oneDNN's fp16 kernels (a host without them skips those cells)."""
    if not installed_op():
        return (
            "deepspeed was installed without its prebuilt shared-memory op, which its CPU backend would "
            "compile inside the first cell: DS_BUILD_SHM_COMM=1 pip install --no-cache-dir "
            "--no-build-isolation deepspeed"
        )
    sides = (cell.save, cell.load) if isinstance(cell, Transfer) else (cell,)
    fp16 = any(precision_of(c.precision).computes_in == torch.float16 for c in sides)
    if fp16 and backend == "gloo" and not torch.ops.mkldnn._is_mkldnn_fp16_supported():
        return FP16_CPU_REASON
    return None


def installed_op() -> bool:
    """Whether deepspeed was installed with its shared-memory op prebuilt (read from the
    distribution's files: importing deepspeed here would pick its accelerator in the pytest
    process)."""
    import importlib.metadata

    try:
        files = importlib.metadata.files(DIST) or []
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(f.name.startswith("deepspeed_shm_comm_op") for f in files)

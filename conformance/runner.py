"""Run one case in a world of the pool and turn how it ended into a CellResult."""

from __future__ import annotations

import time
import zlib

import torch

from conformance.case import Case
from conformance.check.roundtrip import RoundTrip, StrategyFactory, run_roundtrip
from conformance.matrix import unsupported_reason
from conformance.outcome import CellResult, Outcome
from conformance.strategy.builtin import builtin_strategy
from conformance.world import CellRun, WorldPool

STATUS_OUTCOMES = {"error": Outcome.ERROR, "crash": Outcome.CRASH, "hang": Outcome.HANG}


def resolve_backend(choice: str) -> str:
    """auto: nccl where CUDA is available, else gloo."""
    if choice == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if choice not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {choice!r}: use auto, gloo or nccl")
    return choice


# API tokens that need the module on a GPU while wrapping: FSDP1's sync_module_states=True
# raises "The module has CPU parameters or buffers when `sync_module_states=True`, which
# requires them to be on GPU" for CPU modules (torch 2.13).
GPU_ONLY_APIS = {"legacy_full_rank0_init": "FSDP1 sync_module_states=True refuses CPU modules"}


def environment_skip(case: Case, backend: str) -> str | None:
    """Why this cell cannot run here, or None."""
    if backend == "gloo" and case.api in GPU_ONLY_APIS:
        return f"needs a GPU (nccl): {GPU_ONLY_APIS[case.api]}"
    if backend == "nccl":
        visible = torch.cuda.device_count()
        if visible < case.world_size:
            return f"needs {case.world_size} GPUs for nccl, {visible} visible"
    return None


def case_seed(case: Case) -> int:
    """Stable across runs and xdist workers (Python's hash() is not)."""
    return zlib.crc32(case.id.encode()) % 2**31


def _summarize(case: Case, run: CellRun) -> tuple[Outcome, str]:
    if run.status != "ok":
        return STATUS_OUTCOMES[run.status], run.detail
    failures = [line for value in run.values for line in value["failures"]]
    if failures:
        total = sum(value["failure_count"] for value in run.values)
        return Outcome.FAIL, f"{total} differences after the round trip:\n" + "\n".join(failures)
    rank0 = run.values[0]["compared"]
    return Outcome.PASS, (
        f"bitwise equal after the round trip: {rank0['tensors']} tensors "
        f"({rank0['elements']} elements) of the gathered state on rank 0, "
        f"and every rank's local state ({run.values[0]['compared']['keys']} keys on rank 0) "
        f"on {case.world_size} rank(s)"
    )


def run_case(
    pool: WorldPool,
    case: Case,
    *,
    backend: str,
    timeout_s: float,
    strategy_factory: StrategyFactory = builtin_strategy,
) -> CellResult:
    start = time.monotonic()
    axes = {**case.axes(), "backend": backend}
    reason = unsupported_reason(case)
    if reason:
        return CellResult(case.id, axes, Outcome.UNSUPPORTED, reason, 0.0)
    reason = environment_skip(case, backend)
    if reason:
        return CellResult(case.id, axes, Outcome.SKIP, reason, 0.0)
    run = pool.run(
        backend,
        case.world_size,
        run_roundtrip,
        RoundTrip(case, strategy_factory),
        timeout_s=timeout_s,
        seed=case_seed(case),
    )
    outcome, detail = _summarize(case, run)
    return CellResult(case.id, axes, outcome, detail, time.monotonic() - start)

"""Run one case in a world of the pool and turn how it ended into a CellResult."""

from __future__ import annotations

import time
import traceback
from typing import Any

import torch

from conformance.case import Case, Transfer, seed_of
from conformance.check.base import StrategyFactory, Under
from conformance.check.phases import Phases, SharedSaves
from conformance.check.registry import CHECKS
from conformance.construction.registry import plugin_modules as construction_plugins
from conformance.layout.builtin import builtin_strategy
from conformance.layout.registry import layout_of
from conformance.matrix import (
    refusal_reason,
    unsupported_by_design,
)
from conformance.observed import Observed, from_detail
from conformance.optim.registry import plugin_modules as optimizer_plugins
from conformance.optim.registry import unavailable as optimizer_unavailable
from conformance.outcome import FAILING, NEVER_EXPECTED, CellResult, Outcome
from conformance.precision.registry import plugin_modules as precision_plugins
from conformance.precision.registry import unavailable as precision_unavailable
from conformance.strategy.registry import RegisteredStrategy
from conformance.strategy.storage import STORAGES
from conformance.world import CellPool
from conformance.world.devices import visible_gpus

Cell = Case | Transfer


def resolve_backend(choice: str) -> str:
    """One backend for every world: auto is nccl where CUDA is available, else gloo."""
    if choice == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if choice not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {choice!r}: use auto, gloo or nccl")
    return choice


def backend_choice(choice: str) -> str:
    """What a pytest run's cells choose from: gloo or nccl as given; auto where GPUs are
    visible (each cell then takes nccl when the GPUs hold its worlds, gloo when they do not:
    cell_backend), gloo where none are."""
    if choice == "auto":
        return "auto" if visible_gpus() else "gloo"
    return resolve_backend(choice)


def world_sizes(cell: Cell) -> tuple[int, ...]:
    return (cell.save.world_size, cell.load.world_size) if isinstance(cell, Transfer) else (cell.world_size,)


def cell_backend(choice: str, cell: Cell, gpus: int) -> str:
    """The backend a cell runs on: under auto, nccl when `gpus` hold every world it needs (a
    rank per GPU), else gloo, so that a machine with fewer GPUs than ranks still runs its larger
    worlds on the CPU. The same on every xdist worker: each sees every GPU."""
    if choice != "auto":
        return choice
    return "nccl" if gpus and max(world_sizes(cell)) <= gpus else "gloo"


def environment_skip(case: Case, backend: str) -> str | None:
    """Why this cell cannot run here, or None."""
    missing = optimizer_unavailable(case.optimizer) or precision_unavailable(case.precision)
    if missing:
        return missing
    layout = layout_of(case)
    needs = layout.needs_accelerator or getattr(layout.apis.get(case.api), "needs_accelerator", "")
    if backend == "gloo" and needs:
        return f"needs a GPU (nccl): {needs}"
    if backend == "nccl":
        visible = len(visible_gpus())
        if visible < case.world_size:
            return (
                f"needs {case.world_size} GPUs for nccl, {visible} visible (--backend auto runs it "
                "on gloo instead)"
            )
    return None


def _not_here(cell: Cell, backend: str, registered: RegisteredStrategy | None) -> tuple[Outcome, str] | None:
    """Unsupported by design (the strategy's declaration, then the matrix's rules: the order a
    covering run folds them in), else a skip: the strategy's own, then the environment's."""
    reason = unsupported_by_design(cell, registered)
    if reason:
        return Outcome.UNSUPPORTED, reason
    if registered is not None:
        reason = registered.skip_reason(cell, backend)
        if reason:
            return Outcome.SKIP, reason
    if isinstance(cell, Transfer):
        for side, case in (("save", cell.save), ("load", cell.load)):
            reason = environment_skip(case, backend)
            if reason:
                return Outcome.SKIP, f"{side} side: {reason}"
        return None
    reason = environment_skip(cell, backend)
    return (Outcome.SKIP, reason) if reason else None


# What every rank of a pool's worlds imports once at start (WorldPool(preload=...)): the
# round trip's modules, which almost every cell uses, so no cell pays for their import.
RANK_PRELOAD: tuple[str, ...] = ("conformance.check.roundtrip",)


def rank_preload() -> tuple[str, ...]:
    """RANK_PRELOAD and the plugin modules that registered an axis value (an optimizer, a precision): a rank
    finds a plugin's value only once it has imported the module that registers it."""
    return (*RANK_PRELOAD, *optimizer_plugins(), *precision_plugins(), *construction_plugins())


def run_case(
    pool: CellPool,
    case: Cell,
    *,
    backend: str,
    timeout_s: float,
    strategy_factory: StrategyFactory = builtin_strategy,
    registered: RegisteredStrategy | None = None,
    shared: SharedSaves | None = None,
) -> CellResult:
    """Run one cell of any check and say how it ended. A fault of the harness itself (in this
    process) is the cell's harness-error, with its traceback: never a lost cell. `registered`: the
    strategy of a cell of a registered strategy; its declaration decides what is unsupported,
    and its factory replaces `strategy_factory`. `shared`: the saves the cells of this process
    share (None: each cell saves its own)."""
    start = time.monotonic()
    if registered is not None:
        strategy_factory = registered.factory
    try:
        return _run_case(
            pool,
            case,
            backend=backend,
            timeout_s=timeout_s,
            strategy_factory=strategy_factory,
            registered=registered,
            shared=shared,
        )
    except Exception:
        return harness_error(case.id, {**case.axes(), "backend": backend}, time.monotonic() - start)


def harness_error(cell_id: str, axes: dict[str, object], duration_s: float) -> CellResult:
    """The exception being handled, a fault of the harness itself, as the cell's harness-error."""
    detail = "harness error (in the pytest process, not on a rank):\n" + traceback.format_exc()
    return CellResult(cell_id, axes, Outcome.HARNESS_ERROR, detail, duration_s)


def _run_case(
    pool: CellPool,
    case: Cell,
    *,
    backend: str,
    timeout_s: float,
    strategy_factory: StrategyFactory,
    registered: RegisteredStrategy | None,
    shared: SharedSaves | None,
) -> CellResult:
    start = time.monotonic()
    axes = {**case.axes(), "backend": backend}
    verdict = _not_here(case, backend, registered)
    if verdict:
        return CellResult(case.id, axes, verdict[0], verdict[1], 0.0)
    phases = Phases(pool, backend, timeout_s, seed=seed_of(case), shared=shared)
    saving = case.save if isinstance(case, Transfer) else case
    storage = registered.storage if registered is not None else STORAGES.get(saving.storage)
    under = Under(
        strategy_factory,
        storage,
        refusal_reason(case, storage) if isinstance(case, Transfer) else None,
    )
    outcome, detail = CHECKS[case.check].execute(phases, case, under)
    return CellResult(
        case.id,
        axes,
        outcome,
        phases.described(detail),
        time.monotonic() - start,
        rerun=bool(phases.reruns),
        observed=observed_of_outcome(outcome, detail, phases.observed),
    )


def observed_of_outcome(outcome: Outcome, detail: str, found: list[Observed]) -> tuple[dict[str, Any], ...]:
    """A cell's records: what the check found, for a cell that failed, errored, crashed or hung
    (a pass that refused as it must keeps none). An error the check did not record (its detail
    is the world's) is read from the detail."""
    if outcome not in FAILING - NEVER_EXPECTED:
        return ()
    if not found and outcome is not Outcome.FAIL:
        found = from_detail(outcome.value, detail)
    return tuple(o.to_json() for o in found)

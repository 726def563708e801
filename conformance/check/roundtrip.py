"""The round-trip check: train, save, load into a fresh model and optimizer, compare bitwise.

Runs on every rank. Guards against a vacuous pass: the saved state must hold parameters and
optimizer state; the fresh model must differ from the trained one before the load (so a load
that does nothing fails); and the state is read by the harness itself, never through the
strategy's own state-dict code.

Buffers (BatchNorm running stats) are per rank under FSDP and not synced, so which copy a
rank gets back depends on where the checkpoint keeps them (one file written by rank 0: rank
0's; per-rank files: its own; a DCP directory: the one copy its de-duplication kept). One rule
holds for every strategy and storage, built-in or registered, without knowing which: after
the load, each rank's buffer is bitwise one rank's saved copy of it. A load that leaves the
fresh buffers, or any other values, fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch import nn

from conformance.case import DEFAULT_CONSTRUCTION, Case
from conformance.check.base import CaseCells, Check, StrategyFactory, Under
from conformance.check.compare import compare_states, first_of_each_kind
from conformance.check.construction_cells import META_CI_SLICE, META_SLICE, RANK0_SLICE
from conformance.check.fused_cells import FUSED_SLICE
from conformance.check.phases import STATUS_OUTCOMES, Phases, observed_of
from conformance.check.roundtrip_cells import (
    DEFAULT_MODEL_SLICE,
    DEFAULT_PRECISION_SLICE,
    EP_SLICE,
    FEATURES,
    FLAT_WRAPPERS_AND_APIS,
    FSDP1_TP_SLICE,
    GATE_OPTIMIZER_SLICE,
    GRAD_DTYPE_SLICE,
    HSDP_TP_SLICE,
    HSDP_WRAPPERS_AND_APIS,
    LAYOUT_CI_SLICE,
    LAYOUT_MODELS_SLICE,
    LAYOUT_SLICE,
    MODEL_SLICE,
    MOE_SLICE,
    OPTIM_OFFLOAD_SLICE,
    OPTIMIZER_PRODUCT_SLICE,
    OPTIMIZER_SLICE,
    PP_FSDP_SLICE,
    PRECISION_CI_SLICE,
    PRECISION_MODEL_SLICE,
    PRECISION_OPTIMIZER_SLICE,
    PRECISION_SLICE,
    TP_PROPERTY_SLICE,
    TP_SLICE,
)
from conformance.check.sanity import sanity_records, sharding_problems
from conformance.check.slices import EVERY_WRAPPER_AND_API, MAIN_SLICE
from conformance.check.snapshot import Snapshot, count_elements, full_state, local_state
from conformance.construction.registry import construction_of
from conformance.layout.builtin import builtin_strategy
from conformance.layout.registry import layout_of
from conformance.models import build_model
from conformance.observed import from_detail
from conformance.optim.several import holders_of
from conformance.outcome import Outcome
from conformance.precision.registry import precision_of
from conformance.strategy.owned import owned_state
from conformance.strategy.protocol import Strategy, TrainState
from conformance.strategy.under_test import strategy_under_test
from conformance.training import build_optimizer, train_state
from conformance.world import RankContext
from conformance.world.attribution import CheckVerdict

MAX_REPORTED = 8


class VacuousCheckError(CheckVerdict):
    """The check would have nothing to compare: a pass would mean nothing. A verdict about the
    code under test (the cell's error), not a fault of the harness."""


@dataclass(frozen=True)
class RoundTrip:
    """The argument of a round-trip cell: the case and the factory of the strategy under test."""

    case: Case
    strategy_factory: StrategyFactory = field(default=builtin_strategy)


def flat_sharded(case: Case, world_size: int) -> bool:
    """Whether FSDP1 keeps each rank's parameters as a shard of a flat parameter."""
    return layout_of(case).flat_shards and world_size > 1


def _require_substance(snapshot: Snapshot) -> None:
    if not any(k.startswith("param/") for k in snapshot):
        raise VacuousCheckError("the trained model has no parameters to compare")
    if not any(k.startswith("optim/") for k in snapshot):
        raise VacuousCheckError(
            "the optimizer holds no state after training: nothing to compare (a framework's container "
            "of optimizers: own_training lists the torch optimizers in it as TrainState.holders)"
        )


def differs_somewhere(trained: Snapshot, fresh: Snapshot) -> bool:
    """Whether some parameter of `trained` differs in `fresh` (a load could be told from none)."""
    keys = [k for k in trained if k.startswith("param/") and k in fresh]
    return any(compare_states({k: trained[k]}, {k: fresh[k]}) for k in keys)


def limit_lines(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_REPORTED:
        return lines
    return [*lines[:MAX_REPORTED], f"... and {len(lines) - MAX_REPORTED} more differences"]


def fresh_state(
    strategy: Strategy,
    case: Case,
    ctx: RankContext,
    seed: int,
    preload: Callable[[Any], None] | None = None,
    *,
    loading: bool = False,
) -> TrainState:
    """The cell's model wrapped by the strategy, its optimizer, scheduler and scaler. loading: the
    model a checkpoint is loaded into, built as the cell's construction says (the trained one is
    always built by its constructor)."""
    precision = precision_of(case.precision)
    construction = construction_of(case.construction if loading else DEFAULT_CONSTRUCTION)
    if preload is not None and construction.on_meta:
        raise ValueError(
            f"{case.id}: a strategy that loads before wrapping takes no model built on the meta device"
        )

    def make() -> nn.Module:
        model = precision.prepare(build_model(case.model, seed, ctx.rank, ctx.world_size))
        if preload is not None:
            preload(model)
        return model

    model = construction.build(
        make,
        lambda m: strategy.wrap(m, ctx),
        ctx.device,
        layout_of(case).materialize,
        seed=seed,
        rank=ctx.rank,
    )
    optim, scheduler = build_optimizer(case.optimizer, model, case.model)
    scaler = precision.scaler(ctx.device, replicated=layout_of(case).replicated)
    state = TrainState(model, optim, scheduler, holders=holders_of(optim), scaler=scaler)
    return owned_state(strategy, state, ctx)


def preload_hook(strategy: Strategy, path: Path, ctx: RankContext) -> Callable[[Any], None] | None:
    """The strategy's optional load_before_wrap, bound to this checkpoint, for fresh_state."""
    hook = getattr(strategy, "load_before_wrap", None)
    return (lambda model: hook(model, path, ctx)) if callable(hook) else None


def load_checkpoint(
    strategy: Strategy, case: Case, ctx: RankContext, path: Path, fresh: TrainState
) -> TrainState:
    """Load the checkpoint into the fresh state (already checked to differ from the saved
    one); a strategy that loads before wrapping gets a fresh model of the same seed instead,
    which it loads into, and the state that was checked is set aside."""
    preload = preload_hook(strategy, path, ctx)
    if preload is not None:
        fresh = fresh_state(strategy, case, ctx, seed=ctx.seed + 1, preload=preload, loading=True)
    strategy.load(fresh, path, ctx)
    return fresh


def _buffers(snapshot: Snapshot) -> Snapshot:
    return {k: v for k, v in snapshot.items() if k.startswith("buffer/")}


def expected_buffers(ctx: RankContext, before: Snapshot, after: Snapshot) -> Snapshot:
    """What each buffer must be after the load on this rank (see the module doc): one rank's
    saved copy of it, bitwise; the copy this rank got when it got one, else its own (which then
    fails, naming the difference). The same rule for every strategy and storage. A collective."""
    mine = _buffers(before)
    if not mine:
        return mine
    everyone: list[Snapshot] = [{} for _ in range(ctx.world_size)]
    dist.all_gather_object(everyone, mine)
    expected = {}
    for key, value in mine.items():
        got = after.get(key)
        kept = [r[key] for r in everyone if got is not None and not compare_states({key: r[key]}, {key: got})]
        expected[key] = kept[0] if kept else value
    return expected


def run_roundtrip(ctx: RankContext, spec: RoundTrip) -> dict[str, Any]:
    case, sharded = spec.case, flat_sharded(spec.case, ctx.world_size)
    strategy = strategy_under_test(spec.strategy_factory, case)

    trained = fresh_state(strategy, case, ctx, seed=ctx.seed)
    train_state(trained, ctx, case)
    failures = sharding_problems(case, ctx, trained.model, strategy)
    observed = sanity_records(failures, ctx.rank)
    before_local = local_state(trained.model, trained.optimizers, trained.stateful)
    before_full = full_state(trained.model, trained.optimizers, trained.stateful, ctx, sharded=sharded)
    if ctx.rank == 0:  # the whole state: a rank whose shard is empty may hold no optimizer state
        _require_substance(before_full)  # type: ignore[arg-type]

    path = ctx.cell_dir / "checkpoint"
    strategy.save(trained, path, ctx)
    after_save = local_state(trained.model, trained.optimizers, trained.stateful)
    changed = compare_states(before_local, after_save)
    failures += [f"rank {ctx.rank}: save changed the live state: {d}" for d in changed]
    observed += [d.observed("live state after save", ctx.rank) for d in changed]

    fresh = fresh_state(strategy, case, ctx, seed=ctx.seed + 1, loading=True)
    if fresh.model is trained.model or fresh.optim is trained.optim:
        raise VacuousCheckError(
            "the strategy returned the trained model again instead of wrapping the fresh one"
        )
    fresh_full = full_state(fresh.model, fresh.optimizers, fresh.stateful, ctx, sharded=sharded)
    if ctx.rank == 0 and not differs_somewhere(before_full, fresh_full):  # type: ignore[arg-type]
        raise VacuousCheckError(
            "the fresh model already equals the trained one: a load could not be told from no load"
        )

    fresh = load_checkpoint(strategy, case, ctx, path, fresh)
    after_local = local_state(fresh.model, fresh.optimizers, fresh.stateful)
    after_full = full_state(fresh.model, fresh.optimizers, fresh.stateful, ctx, sharded=sharded)
    buffers = expected_buffers(ctx, before_local, after_local)
    expected_local = {**before_local, **buffers}

    if ctx.rank == 0:
        expected_full = {**before_full, **buffers}  # type: ignore[dict-item]
        full_diffs = first_of_each_kind(compare_states(expected_full, after_full))  # type: ignore[arg-type]
        failures = [f"full state: {d}" for d in full_diffs] + failures
        observed = [d.observed("full state") for d in full_diffs] + observed
    local_diffs = first_of_each_kind(compare_states(expected_local, after_local))
    failures += [f"rank {ctx.rank} local state: {d}" for d in local_diffs]
    observed += [d.observed("local state", ctx.rank) for d in local_diffs]
    tensors, elements = count_elements(before_full if ctx.rank == 0 else before_local)  # type: ignore[arg-type]
    return {
        "rank": ctx.rank,
        "failures": limit_lines(failures),
        "failure_count": len(failures),
        "observed": observed,
        "compared": {"keys": len(before_local), "tensors": tensors, "elements": elements},
    }


def execute(phases: Phases, case: Case, under: Under) -> tuple[Outcome, str]:
    """One world runs the whole round trip (run_roundtrip on every rank)."""
    run = phases.pool.run(
        phases.backend,
        case.world_size,
        run_roundtrip,
        RoundTrip(case, under.factory),
        timeout_s=phases.timeout_s,
        seed=phases.seed,
    )
    if run.note:  # a rerun in a fresh world: the runner leads the detail with its note
        phases.reruns.append(("", run))
    if run.status != "ok":
        phases.observed += from_detail(run.status, run.detail)
        return STATUS_OUTCOMES[run.status], run.detail
    failures = [line for value in run.values for line in value["failures"]]
    phases.observed += observed_of(run.values)
    if failures:
        total = sum(value["failure_count"] for value in run.values)
        return Outcome.FAIL, f"{total} differences after the round trip:\n" + "\n".join(failures)
    rank0 = run.values[0]["compared"]
    return Outcome.PASS, (
        f"bitwise equal after the round trip: {rank0['tensors']} tensors "
        f"({rank0['elements']} elements) of the gathered state on rank 0, "
        f"and every rank's local state ({rank0['keys']} keys on rank 0) "
        f"on {case.world_size} rank(s)"
    )


CHECK = Check(
    name="roundtrip",
    title="Round trip: save, load into a fresh model, compare",
    shape=CaseCells(
        {
            "ci": (
                (MAIN_SLICE, (2,)),
                (GATE_OPTIMIZER_SLICE, (2,)),
                (OPTIM_OFFLOAD_SLICE, (2,)),
                (LAYOUT_CI_SLICE, (2,)),
                (PRECISION_CI_SLICE, (2,)),
                (META_CI_SLICE, (2,)),
            ),
            "default": (
                (FLAT_WRAPPERS_AND_APIS, (2,)),
                (MAIN_SLICE, (4,)),
                (HSDP_WRAPPERS_AND_APIS, (2, 4)),  # every (replicate, shard) mesh of 2 and 4 ranks
                (OPTIMIZER_SLICE, (1, 2)),
                (DEFAULT_MODEL_SLICE, (2,)),
                (MOE_SLICE, (4,)),  # the recipe is at 4 ranks; 2 ranks are in full
                (DEFAULT_PRECISION_SLICE, (2,)),
                (GRAD_DTYPE_SLICE, (1,)),
                (LAYOUT_SLICE, (2,)),
                (TP_SLICE, (4,)),  # every (dp, tp) mesh of 4 ranks
                (FSDP1_TP_SLICE, (4,)),
                (EP_SLICE, (2, 4)),
                (PP_FSDP_SLICE, (4,)),  # 2 stages, each FSDP over 2 ranks
                (META_SLICE, (2,)),
                (RANK0_SLICE, (2,)),
                (FUSED_SLICE, (2,)),
            ),
            "full": (
                *(
                    (slice_, (1, 2, 4))
                    for slice_ in (
                        EVERY_WRAPPER_AND_API,
                        OPTIMIZER_SLICE,
                        MODEL_SLICE,
                        MOE_SLICE,
                        PRECISION_SLICE,
                        LAYOUT_SLICE,
                        EP_SLICE,
                    )
                ),
                (OPTIMIZER_PRODUCT_SLICE, (2,)),  # each option at 1 and 4 ranks: OPTIMIZER_SLICE
                (PRECISION_OPTIMIZER_SLICE, (2,)),
                (PRECISION_MODEL_SLICE, (2,)),
                (GRAD_DTYPE_SLICE, (1,)),
                (LAYOUT_MODELS_SLICE, (2,)),
                (HSDP_TP_SLICE, (8,)),
                (FSDP1_TP_SLICE, (4,)),
                (TP_PROPERTY_SLICE, (2, 4)),
                (PP_FSDP_SLICE, (2, 4)),
                (META_SLICE, (1, 2, 4)),
                (RANK0_SLICE, (2, 4)),
                (FUSED_SLICE, (2, 4)),
            ),
        }
    ),
    execute=execute,
    features=FEATURES,
    registered=True,
    properties=True,
)

"""The round-trip check: train, save, load into a fresh model and optimizer, compare bitwise.

Runs on every rank. Guards against a vacuous pass: the saved state must hold parameters and
optimizer state; the fresh model must differ from the trained one before the load (so a load
that does nothing fails); and the state is read by the harness itself, never through the
strategy's own state-dict code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.case import Case
from conformance.check.compare import compare_states, first_of_each_kind
from conformance.check.snapshot import Snapshot, count_elements, full_state, local_state
from conformance.strategy.builtin import builtin_strategy
from conformance.strategy.protocol import Strategy
from conformance.training import build_model, build_optimizer, train
from conformance.world import RankContext

StrategyFactory = Callable[[Case], Strategy]
MAX_REPORTED = 8


class VacuousCheckError(AssertionError):
    """The check would have nothing to compare: a pass would mean nothing."""


@dataclass(frozen=True)
class RoundTrip:
    """The argument of a round-trip cell: the case and the factory of the strategy under test."""

    case: Case
    strategy_factory: StrategyFactory = field(default=builtin_strategy)


def flat_sharded(case: Case, world_size: int) -> bool:
    """Whether FSDP1 keeps each rank's parameters as a shard of a flat parameter."""
    return case.wrapper == "fsdp1" and case.sharding != "no_shard" and world_size > 1


def _require_substance(snapshot: Snapshot) -> None:
    params = [k for k in snapshot if k.startswith("param/")]
    optim = [k for k in snapshot if k.startswith("optim/")]
    if not params:
        raise VacuousCheckError("the trained model has no parameters to compare")
    if not optim:
        raise VacuousCheckError("the optimizer holds no state after training: nothing to compare")


def _differs_somewhere(trained: Snapshot, fresh: Snapshot) -> bool:
    keys = [k for k in trained if k.startswith("param/") and k in fresh]
    return any(compare_states({k: trained[k]}, {k: fresh[k]}) for k in keys)


def _limit(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_REPORTED:
        return lines
    return [*lines[:MAX_REPORTED], f"... and {len(lines) - MAX_REPORTED} more differences"]


def run_roundtrip(ctx: RankContext, spec: RoundTrip) -> dict[str, Any]:
    case, sharded = spec.case, flat_sharded(spec.case, ctx.world_size)
    strategy = spec.strategy_factory(case)

    model = strategy.wrap(build_model(case.model, seed=ctx.seed), ctx)
    optim = build_optimizer(case.optimizer, model)
    train(model, optim, ctx, case.model)
    before_local = local_state(model, optim)
    before_full = full_state(model, optim, ctx, sharded=sharded)
    _require_substance(before_local)

    path = ctx.cell_dir / "checkpoint"
    strategy.save(model, optim, path, ctx)
    failures = [
        f"rank {ctx.rank}: save changed the live state: {d}"
        for d in compare_states(before_local, local_state(model, optim))
    ]

    fresh = strategy.wrap(build_model(case.model, seed=ctx.seed + 1), ctx)
    fresh_optim = build_optimizer(case.optimizer, fresh)
    if fresh is model or fresh_optim is optim:
        raise VacuousCheckError(
            "the strategy returned the trained model again instead of wrapping the fresh one"
        )
    fresh_full = full_state(fresh, fresh_optim, ctx, sharded=sharded)
    if ctx.rank == 0 and not _differs_somewhere(before_full, fresh_full):  # type: ignore[arg-type]
        raise VacuousCheckError(
            "the fresh model already equals the trained one: a load could not be told from no load"
        )

    strategy.load(fresh, fresh_optim, path, ctx)
    after_local = local_state(fresh, fresh_optim)
    after_full = full_state(fresh, fresh_optim, ctx, sharded=sharded)

    if ctx.rank == 0:
        full_diffs = first_of_each_kind(compare_states(before_full, after_full))  # type: ignore[arg-type]
        failures = [f"full state: {d}" for d in full_diffs] + failures
    local_diffs = first_of_each_kind(compare_states(before_local, after_local))
    failures += [f"rank {ctx.rank} local state: {d}" for d in local_diffs]
    tensors, elements = count_elements(before_full if ctx.rank == 0 else before_local)  # type: ignore[arg-type]
    return {
        "rank": ctx.rank,
        "failures": _limit(failures),
        "failure_count": len(failures),
        "compared": {"keys": len(before_local), "tensors": tensors, "elements": elements},
    }

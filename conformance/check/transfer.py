"""Transfer checks: a checkpoint saved by one configuration, loaded by another.

- reshard: the same strategy saves in a world of N ranks and loads in a separate world of M.
- interop: another wrapper, state-dict API or storage loads what one configuration saved
  (the square save x load grid, its diagonal included).

The save phase trains, takes the canonical state (one whole tensor per original parameter
name: `canonical.py`) on rank 0 and saves; the load phase builds a fresh model with other
weights, loads, and compares its canonical state with the saved one bitwise. Where a
configuration cannot load by design (the matrix's `REFUSALS` table), a clear error on load
is the expected outcome and passes; a load that succeeds with other values fails either way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.case import Case, Transfer, seed_of
from conformance.check.base import Under
from conformance.check.canonical import canonical_state
from conformance.check.compare import compare_states, first_of_each_kind
from conformance.check.phases import PhaseError, Phases, observed_of
from conformance.check.roundtrip import (
    StrategyFactory,
    VacuousCheckError,
    differs_somewhere,
    flat_sharded,
    fresh_state,
    limit_lines,
    load_checkpoint,
)
from conformance.check.sanity import sanity_records, sharding_problems
from conformance.check.snapshot import Snapshot, count_elements, local_buffers
from conformance.layout.builtin import builtin_strategy
from conformance.models import build_model
from conformance.outcome import Outcome
from conformance.strategy.under_test import LOADING_CALLS, strategy_under_test
from conformance.training import train_state
from conformance.world import RankContext

Verdict = tuple[Outcome, str]


@dataclass(frozen=True)
class SaveSpec:
    case: Case
    directory: str
    strategy_factory: StrategyFactory = field(default=builtin_strategy)


@dataclass(frozen=True)
class LoadSpec:
    case: Case
    directory: str
    expected: Snapshot  # the canonical state the save phase saw on its rank 0
    strategy_factory: StrategyFactory = field(default=builtin_strategy)


def canonical_of(state: Any, case: Case, ctx: RankContext) -> Snapshot | None:
    """The canonical state of a TrainState on rank 0 (None elsewhere). A collective."""
    plain = build_model(case.model, ctx.seed, ctx.rank, ctx.world_size)
    return canonical_state(
        state.model,
        state.optimizers,
        state.stateful,
        ctx,
        sharded=flat_sharded(case, ctx.world_size),
        plain=plain,
    )


def save_phase(ctx: RankContext, spec: SaveSpec) -> dict[str, Any]:
    case = spec.case
    strategy = strategy_under_test(spec.strategy_factory, case)
    trained = fresh_state(strategy, case, ctx, seed=ctx.seed)
    train_state(trained, ctx, case)
    problems = sharding_problems(case, ctx, trained.model, strategy)
    observed = sanity_records(problems, ctx.rank)
    expected = canonical_of(trained, case, ctx)
    # each rank's own buffers: a replica's running stats may differ, and a full checkpoint holds
    # one rank's copy (the hygiene check accepts any rank's, as the round trip does)
    buffers = local_buffers(trained.model)
    strategy.save(trained, Path(spec.directory), ctx)
    return {"problems": problems, "expected": expected, "observed": observed, "buffers": buffers}


def saved(phases: Phases, case: Case, directory: str, factory: StrategyFactory) -> list[dict[str, Any]]:
    """The save phase of the configuration a cell saves (the case as a round trip saves it: a
    check's name and variant are no part of what it trains and writes), seeded by that
    configuration and shared by the cells of the process that save it (Phases.save)."""
    config = dataclasses.replace(case, check="roundtrip", variant="")
    return phases.save(
        config.world_size,
        save_phase,
        lambda at: SaveSpec(config, at, factory),
        Path(directory),
        key=(config, factory),
        seed=seed_of(config),
    )


def load_phase(ctx: RankContext, spec: LoadSpec) -> dict[str, Any]:
    case, path = spec.case, Path(spec.directory)
    strategy = strategy_under_test(spec.strategy_factory, case)
    fresh = fresh_state(strategy, case, ctx, seed=ctx.seed + 1, loading=True)
    before = canonical_of(fresh, case, ctx)
    if before is not None:  # rank 0
        if not any(k.startswith("param/") for k in spec.expected):
            raise VacuousCheckError("the saved state has no parameters to compare")
        if not differs_somewhere(spec.expected, before):
            raise VacuousCheckError(
                "the fresh model already equals the saved one: a load could not be told from no load"
            )
    fresh = load_checkpoint(strategy, case, ctx, path, fresh)
    # The canonical state is rank 0's view: replicas (DDP, NO_SHARD, HSDP groups) that did not
    # all load the same values are caught by the sanity check, run again on the loaded model.
    insane = sharding_problems(case, ctx, fresh.model, strategy)
    problems = [f"after the load, {p}" for p in insane]
    observed = sanity_records(insane, ctx.rank, scope="sanity after the load")
    after = canonical_of(fresh, case, ctx)
    if after is None:
        return {"problems": problems, "failures": [], "observed": observed}
    found = first_of_each_kind(compare_states(spec.expected, after))
    diffs = [str(d) for d in found]
    tensors, elements = count_elements(spec.expected)
    return {
        "problems": problems,
        "failures": limit_lines(diffs),
        "failure_count": len(diffs),
        "observed": observed + [d.observed("loaded state") for d in found],
        "tensors": tensors,
        "elements": elements,
    }


def execute(phases: Phases, transfer: Transfer, under: Under) -> Verdict:
    """Save, load in the other configuration, compare. `under.refusal`: why the load must fail,
    if it must."""
    refusal = under.refusal
    directory = str(phases.scratch())
    save, load = transfer.save, transfer.load
    try:
        written = saved(phases, save, directory, under.factory_of(transfer, save))
    except PhaseError as exc:
        return exc.outcome, exc.detail
    problems = [p for value in written for p in value["problems"]]
    try:
        loaded = phases.run(
            "load",
            load.world_size,
            load_phase,
            LoadSpec(load, directory, written[0]["expected"], under.factory_of(transfer, load)),
        )
    except PhaseError as exc:
        if refusal and not problems:
            refused = phases.refusal(exc, LOADING_CALLS, f"refused, as it must ({refusal})")
            if refused:
                return refused
        return exc.outcome, exc.detail
    phases.observed += observed_of(written, loaded)
    where = f"saved by {save.config} in {save.world_size} ranks, loaded by {load.config} in {load.world_size}"
    note = f" (declared unable to load: {refusal}; it loaded every value right)" if refusal else ""
    return load_verdict(problems, loaded, where, note)


def load_verdict(problems: list[str], loaded: list[dict[str, Any]], where: str, note: str = "") -> Verdict:
    """The verdict of a load phase that ended ok: a fail with every difference (the save's
    `problems`, each rank's, rank 0's comparison), else a pass that says what was compared."""
    rank0 = loaded[0]
    problems = problems + [p for value in loaded for p in value["problems"]]
    failures = problems + rank0["failures"]
    if failures:
        total = len(problems) + rank0["failure_count"]
        return Outcome.FAIL, f"{total} differences, {where}:\n" + "\n".join(failures)
    return Outcome.PASS, (
        f"bitwise equal, {where}: {rank0['tensors']} tensors ({rank0['elements']} elements) "
        f"by original parameter name{note}"
    )

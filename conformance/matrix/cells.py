"""The cells of a run: a profile's cells per check, and each registered strategy's, sorted by id.
Which cells a check has is its own declaration (conformance.check.registry)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.findings import load_findings
from conformance.matrix.costs import Costs, load_costs
from conformance.matrix.covering import cover_each_construction
from conformance.matrix.profiles import PROFILES, Covering, Profile
from conformance.matrix.rules import unsupported_by_design, unsupported_reason
from conformance.optim.registry import covered_late
from conformance.outcome import CellResult, Outcome
from conformance.strategy.registry import RegisteredStrategy, Registry


def _profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown matrix profile {name!r}; known: {sorted(PROFILES)}") from None


def _check(name: str) -> Any:
    try:
        return CHECKS[name]
    except KeyError:
        raise ValueError(f"unknown check {name!r}; known: {list(CHECKS)}") from None


def cells(profile: str, check: str) -> list[Case] | list[Transfer]:
    """Every built-in cell of a profile for a check, sorted by id: ids and order are the same in
    every run and worker."""
    if _profile(profile).covering:
        return covered(profile, check)
    return _check(check).cells(_profile(profile).declares)


@functools.cache
def covered(profile: str, check: str) -> list[Case] | list[Transfer]:
    """A covering profile's built-in cells of a check (conformance.matrix.covering): chosen from
    the supported cells of the declaration its covering names (`within`: full, or its own), presets one
    cell per (feature-table row, feature) and each finding's witness of the profile's own
    declaration; a transfer check's are the declaration's."""
    declared = _check(check).cells(_profile(profile).declares)
    if any(isinstance(c, Transfer) for c in declared):
        return declared
    covering = _profile(profile).covering
    assert covering is not None
    universe = _check(check).cells(covering.within)
    return _choose(covering, check, declared, universe, unsupported_reason, covering.strength)


def _choose(
    covering: Covering,
    check: str,
    declared: list[Case],
    universe: list[Case],
    why_not: Callable[[Case], str | None],
    strength: int,
) -> list[Case]:
    """The covering's cells of a check: the supported cells of `universe` (the declaration it
    chooses from) with the presets of `declared` (the profile's own): one per table answer, each
    witness, and what the covering keeps."""
    costs = load_costs()
    run = [c for c in declared if not why_not(c)]
    supported = [c for c in universe if not why_not(c)]

    def presets_of(run: list[Case], supported: list[Case]) -> list[Case]:
        kept = [c for c in run if covering.keep is not None and covering.keep(c)]
        return feature_presets(check, run, costs) + witnesses(run + supported) + kept

    return cover_late_last(run, supported, presets_of, costs, strength)


def cover_late_last(
    run: list[Case],
    supported: list[Case],
    presets_of: Callable[[list[Case], list[Case]], list[Case]],
    costs: Costs | None = None,
    strength: int = 2,
) -> list[Case]:
    """The covering of `supported` with the presets `presets_of(run, supported)` gives, the cells
    of values covered late (Optimizer.covered_late) last: the other cells' covering is chosen as if
    those values did not exist, and stays; theirs then join it for the pairs it lacks."""
    early_run = [c for c in run if not covered_late(c.optimizer)]
    early = [c for c in supported if not covered_late(c.optimizer)]
    first_presets = presets_of(early_run, early)
    first = cover_each_construction(early + first_presets, first_presets, costs, strength)
    if len(early) == len(supported) and len(early_run) == len(run):
        return first
    presets = presets_of(run, supported) + first
    return cover_each_construction(supported + presets, presets, costs, strength)


def witnesses(cells: list[Case]) -> list[Case]:
    """The cells among these that findings name as their witness (Finding.witness): a covering
    runs each one its full product has, so that no finding goes unseen."""
    named = {w for f in load_findings() for w in f.witnesses}
    return sorted({c for c in cells if c.id in named}, key=lambda c: c.id)


def feature_presets(check: str, run: list[Case], costs: Costs | None = None) -> list[Case]:
    """One cell per (table row, feature) that the cells answer: a row of the full "what works"
    table is a strategy, layout, API and storage, so each word of it (and of the summary rows
    above it) keeps a cell. Of a row's cells, one that a finding names comes first, so that a
    word a finding explains keeps a cell that shows it; then the cheapest (costs.json), then the
    first by id."""
    named = [f for f in load_findings() if not f.marks]
    costs = costs or load_costs()
    chosen: dict[tuple[str, ...], Case] = {}
    for cell in sorted(run, key=lambda c: (not any(f.names(c.id) for f in named), costs.of(c), c.id)):
        axes = cell.axes()
        row = (cell.strategy, cell.wrapper, cell.sharding, cell.api, cell.storage)
        for feature in _check(check).features:
            if feature.selects(axes):
                chosen.setdefault((*row, feature.name), cell)
    return sorted(set(chosen.values()), key=lambda c: c.id)


def cases(profile: str, check: str = "roundtrip") -> list[Case]:
    """The cells of a check whose cells are one configuration each (not a transfer)."""
    out = cells(profile, check)
    if any(isinstance(c, Transfer) for c in out):
        raise ValueError(f"the {check} check's cells are transfers: use cells()")
    return out  # type: ignore[return-value]


def transfers(profile: str, check: str) -> list[Transfer]:
    """Every reshard or interop cell of a profile, sorted by id."""
    out = cells(profile, check)
    if any(isinstance(c, Case) for c in out):
        raise ValueError(f"not a transfer check: {check!r}")
    return out  # type: ignore[return-value]


def strategy_cells(strategy: RegisteredStrategy, profile: str, check: str) -> list[Case] | list[Transfer]:
    """A registered strategy's cells of a check (none when the check is not offered to
    registered strategies); whether it takes each is its own declaration. A covering profile
    meets each value it declares on each axis at least once (the pairs of the strategy axis with
    every other: the pairs among the other axes are the built-in matrix's) and each of its
    (layout, API) pairs, with its declaration's feature answers and witnesses; its transfers
    are the declaration's. Covered one strategy at a time: what another registers never changes
    its cells."""
    declared = _check(check).strategy_cells(_profile(profile).declares, strategy)
    covering = _profile(profile).covering
    if covering is None or not declared or isinstance(declared[0], Transfer):
        return declared

    def why_not(case: Case) -> str | None:
        return unsupported_by_design(case, strategy)

    universe = _check(check).strategy_cells(covering.within, strategy)
    return _choose(covering, check, declared, universe, why_not, covering.strength - 1 or 1)


def declared_profile(profile: str) -> str:
    """The profile that runs a profile's declaration as it is (itself, or for a covering profile
    the product profile of the same declaration): its cells stand for it where covering does not
    choose (the properties' bases)."""
    declares = _profile(profile).declares
    return next(p.name for p in PROFILES.values() if p.declares == declares and not p.covering)


def registered_checks() -> tuple[str, ...]:
    """The checks a registered strategy may declare in Supports.checks."""
    return tuple(name for name, check in CHECKS.items() if check.registered)


def validate(registry: Registry) -> None:
    """Every registered strategy declares only checks offered to registered strategies."""
    offered = registered_checks()
    for name, strategy in sorted(registry.strategies.items()):
        unknown = sorted(set(strategy.supports.checks) - set(offered))
        if unknown:
            raise ValueError(
                f"{name}: checks {unknown} are not offered to registered strategies; offered: {offered}"
            )


def run_cells(registry: Registry, profile: str, check: str) -> list[Case] | list[Transfer]:
    """The cells of a check in a run: the built-in matrix's (unless the registry leaves it
    out), then each registered strategy's, every list sorted by id."""
    validate(registry)
    out: list[Any] = list(cells(profile, check)) if registry.builtin else []
    for _, strategy in sorted(registry.strategies.items()):
        out += strategy_cells(strategy, profile, check)
    return out


def why_unsupported(registry: Registry, cell: Case | Transfer) -> str | None:
    """Why a cell of a run is unsupported by design (its registered strategy's declaration
    first, then the matrix's rules), or None."""
    return unsupported_by_design(cell, registry.strategy_of(cell))


def declared_unsupported(registry: Registry, profile: str, backend: str, ran: set[str]) -> list[CellResult]:
    """A covering profile's run: the cells of its declaration that are unsupported by design and
    not among `ran`, as results with their reason, to fold into rules (report.rules) without ever
    enumerating them. Any other profile: none (its unsupported cells are cells of the run)."""
    if not _profile(profile).covering:
        return []
    out: list[CellResult] = []
    for check in CHECKS:
        for cell in run_cells(registry, declared_profile(profile), check):
            reason = why_unsupported(registry, cell)
            if reason and cell.id not in ran:
                axes = {**cell.axes(), "backend": backend}
                out.append(CellResult(cell.id, axes, Outcome.UNSUPPORTED, reason, 0.0))
    return out

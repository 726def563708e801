"""The cells of a run: a profile's cells per check, and each registered strategy's, sorted by id.
Which cells a check has is its own declaration (conformance.check.registry)."""

from __future__ import annotations

import functools
from typing import Any

from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.findings import load_findings
from conformance.matrix.covering import cover
from conformance.matrix.profiles import PROFILES, Profile
from conformance.matrix.rules import unsupported_reason
from conformance.strategy.registry import RegisteredStrategy, Registry

COVERED_FROM = "default"  # the profile whose transfers and feature answers a covering profile keeps


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
        return covered(check)
    return _check(check).cells(profile)


@functools.cache
def covered(check: str) -> list[Case] | list[Transfer]:
    """A covering profile's cells of a check: chosen from the supported cells of its full product
    (conformance.matrix.covering), presets one cell per (feature-table row, feature) the default
    profile covers; a transfer check's are the default profile's."""
    declared = _check(check).cells(COVERED_FROM)
    if any(isinstance(c, Transfer) for c in declared):
        return declared
    universe = [c for c in _check(check).cells("full") if not unsupported_reason(c)]
    run = [c for c in declared if not unsupported_reason(c)]
    return cover(universe, feature_presets(check, run) + witnesses(run))


def witnesses(run: list[Case]) -> list[Case]:
    """The cells among these that findings name as their witness (Finding.witness)."""
    named = {f.witness for f in load_findings() if f.witness}
    return [c for c in run if c.id in named]


def feature_presets(check: str, run: list[Case]) -> list[Case]:
    """One cell (the first by id) per (wrapper family, API, feature) that the cells answer."""
    chosen: dict[tuple[str, str, str], Case] = {}
    for cell in run:
        axes = cell.axes()
        for feature in _check(check).features:
            if feature.selects(axes):
                chosen.setdefault((cell.family, cell.api, feature.name), cell)
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
    gives it the default profile's."""
    return _check(check).strategy_cells(declared_profile(profile), strategy)


def declared_profile(profile: str) -> str:
    """The profile whose declared cells stand for this one where covering does not choose (its
    transfers, registered strategies' cells, the properties' bases): itself, or default."""
    return COVERED_FROM if _profile(profile).covering else profile


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

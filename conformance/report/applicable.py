"""n/a is its own answer. A feature-table entry the run leaves without a cell is either a debt
(`unknown`: the full declaration has a supported cell for that row and feature, which this profile
did not run) or no question at all (`n/a`: no supported cell of the full declaration can have it,
by the same rules that make a cell `unsupported`, or because the feature's check declares no such
cell for the row: a library's lifecycle for a built-in configuration, a load template where the
load is not a DCP load).

The published tables ask the full declaration (`answers`, stored in the run's metadata as
`environment.not_applicable`, read back as stand-in cells by report.rules.ruled_cells); a run's own
report (the pytest plugin's) leaves its unknowns as they are: enumerating the full declaration
takes seconds that every run would pay."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conformance.case import Case, Transfer
from conformance.check.base import Feature
from conformance.check.registry import CHECKS
from conformance.matrix.cells import cells as profile_cells
from conformance.matrix.cells import strategy_cells
from conformance.matrix.rules import unsupported_by_design
from conformance.outcome import CellResult
from conformance.strategy.registry import RegisteredStrategy, Registry, build_registry

DECLARATION = "full"
NO_CELL = "the full declaration does not ask it of this row: its check declares no such cell here"

Cell = Case | Transfer


def row_for(feature: Feature, cell: Cell) -> str:
    """The table row a declared cell counts for (report.tables.counts_for, on a cell not yet run)."""
    if isinstance(cell, Transfer):
        return cell.load.config if feature.by_loader else cell.save.config
    return cell.config


def _declared(registry: Registry, check: str) -> Iterable[tuple[Cell, RegisteredStrategy | None]]:
    if registry.builtin:
        for cell in profile_cells(DECLARATION, check):
            yield cell, None
    for strategy in registry.strategies.values():
        for cell in strategy_cells(strategy, DECLARATION, check):
            yield cell, strategy


def declared_answers(
    wanted: set[tuple[str, str]], registry: Registry | None = None
) -> tuple[set[tuple[str, str]], dict[tuple[str, str], str]]:
    """Of the (row, feature) pairs wanted: those a supported cell of the full declaration has,
    and for the others that some declared cell has, the reason of the first unsupported one."""
    registry = registry or build_registry([])
    supported: set[tuple[str, str]] = set()
    reasons: dict[tuple[str, str], str] = {}
    for name, check in CHECKS.items():
        for cell, owner in _declared(registry, name):
            axes = cell.axes()
            for feature in check.features:
                if not feature.selects(axes):
                    continue
                key = (row_for(feature, cell), feature.name)
                if key not in wanted or key in supported:
                    continue
                why = unsupported_by_design(cell, owner)
                if why is None:
                    supported.add(key)
                else:
                    reasons.setdefault(key, why)
    return supported, reasons


def not_applicable(unknown: Iterable[tuple[str, str]], registry: Registry | None = None) -> dict[str, Any]:
    """The metadata of a published table's n/a answers: {"declaration": "full", "answers":
    [[row, feature, reason], ...]} for each unknown (row, feature) no supported cell of the full
    declaration has; the rest stay unknown, listed as "unknown": [[row, feature], ...]."""
    wanted = set(unknown)
    supported, reasons = declared_answers(wanted, registry)
    answers = [
        [row, feature, reasons.get((row, feature), NO_CELL)] for row, feature in sorted(wanted - supported)
    ]
    # the debts too, so that a summary row over several strategies says unknown where one of them
    # is, rather than n/a from the others
    unknown_left = [list(key) for key in sorted(supported)]
    return {"declaration": DECLARATION, "answers": answers, "unknown": unknown_left}


def with_not_applicable(
    environment: dict[str, Any], cells: list[CellResult], registry: Registry | None = None
) -> dict[str, Any]:
    """The run's metadata with its n/a answers (computed afresh from the full declaration) for the
    feature-table entries its cells, and its folded unsupported cells, leave unanswered."""
    from conformance.report.rules import ruled_cells
    from conformance.report.tables import feature_cells, features

    base = {k: v for k, v in environment.items() if k != "not_applicable"}
    answered = set(feature_cells(cells + ruled_cells(base)))
    rows = {row for row, _ in answered}
    unknown = {(row, f.name) for row in rows for _, f in features() if (row, f.name) not in answered}
    return {**base, "not_applicable": not_applicable(unknown, registry)}

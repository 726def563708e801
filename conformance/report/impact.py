"""How bad each "no" is, for the tables: a failing cell's worst impact over its records
(conformance.observed.IMPACTS, worst first), where it holds (its findings' scopes), and the
finding behind its worst record, so a table can say "drifts" where only a type changed and
"corrupts" where a tensor did, with the finding one click away."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from conformance.findings import Finding, attribute, record_impact
from conformance.observed import IMPACTS, worst
from conformance.outcome import FAILING, NEVER_EXPECTED, CellResult

# the impacts a table shows in bold: silent loss of data
SEVERE = ("corrupts", "loses")


@dataclass(frozen=True)
class Judged:
    """A failing cell for the tables. impact: its worst record's; scope: where its findings hold
    ("" while a record is unexplained); finding: the id of the finding behind its worst record
    ("" when none explains it); findings: every finding that explains a record of it."""

    impact: str
    scope: str = ""
    finding: str = ""
    findings: tuple[str, ...] = ()
    explained: bool = False


def short_scope(scope: str) -> str:
    """A finding's scope as a table says it: up to its first parenthesis or semicolon."""
    return scope.split(" (", 1)[0].split(";", 1)[0].strip()


def judge_cells(cells: Iterable[CellResult], findings: list[Finding]) -> dict[str, Judged]:
    """cell id -> Judged, for every cell that failed, errored, crashed or hung."""
    out = {}
    for cell in cells:
        if cell.outcome not in FAILING or cell.outcome in NEVER_EXPECTED:
            continue
        attribution = attribute(cell, findings)
        ranked = sorted(attribution.records, key=lambda rf: list(IMPACTS).index(record_impact(rf[0], rf[1])))
        _record, found = ranked[0] if ranked else (None, ())
        scopes = {short_scope(f.scope) for f in attribution.findings}
        out[cell.id] = Judged(
            attribution.impact or "corrupts",
            "; ".join(sorted(scopes)) if attribution.explained else "",
            found[0].id if found else "",
            tuple(f.id for f in attribution.findings),
            attribution.explained,
        )
    return out


def worst_of(cells: Iterable[CellResult], judged: Mapping[str, Judged]) -> Judged | None:
    """The worst Judged over some cells (None when none failed); its scope is the common scope
    of all of them ("" where they differ or one is unexplained)."""
    mine = [judged[c.id] for c in cells if c.id in judged]
    if not mine:
        return None
    impact = worst(j.impact for j in mine) or "corrupts"
    first = next(j for j in mine if j.impact == impact)
    scopes = {j.scope for j in mine}
    return Judged(
        impact,
        scopes.pop() if len(scopes) == 1 else "",
        first.finding,
        tuple(sorted({f for j in mine for f in j.findings})),
        all(j.explained for j in mine),
    )

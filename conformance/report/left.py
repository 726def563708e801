"""Why cells left a table between two runs (`python -m conformance diff`), when a profile
became a covering (conformance.matrix.covering) or a cell stopped being enumerated:

- unsupported by design: the cell never ran; its rule still holds, it is no longer a row;
- covered: every pair of its axis values (and its layout, API and storage together) is met by
  a run cell of the same check and strategy in the new run;
- values met: every value it had is met, though not every pair (a registered strategy's cells
  are covered value by value: the pairs among the other axes are the built-in matrix's);
- not covered: what it met and no new cell meets, listed: a loss to look at.

A cell that did not pass also says whether each finding that explained it is still shown by a
cell of the new run, and which."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from conformance.findings import Finding
from conformance.matrix.covering import FIELDS, items, row_of_axes
from conformance.outcome import FAILING, CellResult, Outcome

AXES = ("layout", *FIELDS)  # the covering's axes: the optimizer word's four among them


@dataclass
class Left:
    unsupported: list[CellResult] = field(default_factory=list)
    covered: list[CellResult] = field(default_factory=list)
    values_met: list[CellResult] = field(default_factory=list)
    not_covered: list[tuple[CellResult, list[tuple[str, ...]]]] = field(default_factory=list)
    # finding id -> (removed cells it explained, a new cell that still shows it or "")
    findings: dict[str, tuple[list[str], str]] = field(default_factory=dict)


def _configuration(cell: CellResult) -> bool:
    """One configuration per cell (not a transfer between two)."""
    return "wrapper" in cell.axes and "load_config" not in cell.axes


def _group(cell: CellResult) -> tuple[str, str]:
    return (str(cell.axes.get("check", "")), str(cell.axes.get("strategy", "")))


def _met(cells: Iterable[CellResult], strength: int) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    out: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for cell in cells:
        if cell.outcome is Outcome.UNSUPPORTED or not _configuration(cell):
            continue
        out.setdefault(_group(cell), set()).update(items(row_of_axes(cell.axes), AXES, strength))
    return out


def why_left(removed: list[CellResult], new: list[CellResult], findings: Iterable[Finding] = ()) -> Left:
    out = Left()
    pairs, values = _met(new, 2), _met(new, 1)
    for cell in removed:
        if cell.outcome is Outcome.UNSUPPORTED:
            out.unsupported.append(cell)
            continue
        if not _configuration(cell):  # a transfer: a covering does not choose them
            out.not_covered.append((cell, []))
            continue
        row = row_of_axes(cell.axes)
        missing = sorted(items(row, AXES, 2) - pairs.get(_group(cell), set()))
        if not missing:
            out.covered.append(cell)
        elif not items(row, AXES, 1) - values.get(_group(cell), set()):
            out.values_met.append(cell)
        else:
            out.not_covered.append((cell, missing))
    failing = [c for c in removed if c.outcome in FAILING]
    for finding in findings:
        gone = [c.id for c in failing if finding.explains(c)]
        if gone:
            still = next((c.id for c in new if c.outcome in FAILING and finding.explains(c)), "")
            out.findings[finding.id] = (gone, still)
    return out


def render_left(left: Left) -> list[str]:
    """The lines the diff prints for the cells that left; empty when none did."""
    total = len(left.unsupported) + len(left.covered) + len(left.values_met) + len(left.not_covered)
    if not total:
        return []
    lines = [
        "",
        f"Why the {total} removed cells left:",
        f"  {len(left.unsupported)} unsupported by design (never ran; the rule still holds, no longer a row)",
        f"  {len(left.covered)} covered: every pair of their axis values is met by a run cell of the "
        "same check and strategy",
        f"  {len(left.values_met)} values met: every value they had is met, not every pair (a "
        "registered strategy's cells are covered value by value)",
        f"  {len(left.not_covered)} not covered (listed below)",
    ]
    for cell, missing in left.not_covered:
        what = "; ".join(_item(m) for m in missing[:3])
        lines.append(f"    {cell.id}: {cell.outcome}: nothing new meets {what or 'it'}")
    if left.findings:
        lines += ["", "Findings of removed cells that did not pass:"]
        for fid, (gone, still) in sorted(left.findings.items()):
            shown = f"still shown by {still}" if still else "NO LONGER SHOWN by any cell"
            lines.append(f"  {fid}: {len(gone)} removed cells; {shown}")
    return lines


def _item(item: tuple[str, ...]) -> str:
    if item[0] == "triple":
        return "(" + ", ".join(item[1:]) + ")"
    return " & ".join(f"{a}={v}" for a, v in zip(item[::2], item[1::2]))

"""Two runs side by side: `python -m conformance diff OLD.json NEW.json`.

The run metadata of both, differing fields marked; counts of added, removed, improved and
regressed cells; then every changed cell as `before -> after`, regressions first. A
regression is a cell that passed and now does not (a pass that became unsupported or
skipped counts too: it no longer runs), or that now fails in a worse way (fail < error <
hang < crash). The exit status is 1 when anything regressed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tabulate import tabulate

from conformance.outcome import FAILING, CellResult, Outcome, first_line

# Environment fields that are expected to differ between any two runs: not marked.
VOLATILE = ("time_utc", "argv", "pytest_args")


@dataclass
class RunDiff:
    added: list[CellResult] = field(default_factory=list)
    removed: list[CellResult] = field(default_factory=list)
    improved: list[tuple[CellResult, CellResult]] = field(default_factory=list)
    regressed: list[tuple[CellResult, CellResult]] = field(default_factory=list)
    changed: list[tuple[CellResult, CellResult]] = field(default_factory=list)  # neither better nor worse


def _rank(outcome: Outcome) -> int:
    """pass > unsupported/skip > fail > error > hang > crash > harness-error, for 'better or
    worse' (a harness-error is no result at all: anything else is better)."""
    return {
        Outcome.HARNESS_ERROR: -1,
        Outcome.PASS: 5,
        Outcome.UNSUPPORTED: 4,
        Outcome.SKIP: 4,
        Outcome.FAIL: 3,
        Outcome.ERROR: 2,
        Outcome.HANG: 1,
        Outcome.CRASH: 0,
    }[outcome]


def diff_runs(old: list[CellResult], new: list[CellResult]) -> RunDiff:
    before, after = {c.id: c for c in old}, {c.id: c for c in new}
    out = RunDiff()
    out.added = [after[i] for i in sorted(after.keys() - before.keys())]
    out.removed = [before[i] for i in sorted(before.keys() - after.keys())]
    for cell_id in sorted(before.keys() & after.keys()):
        a, b = before[cell_id], after[cell_id]
        if a.outcome == b.outcome:
            continue
        if a.outcome is Outcome.PASS or b.outcome is Outcome.HARNESS_ERROR:
            out.regressed.append((a, b))
        elif b.outcome is Outcome.PASS:
            out.improved.append((a, b))
        elif a.outcome in FAILING and b.outcome in FAILING:
            (out.regressed if _rank(b.outcome) < _rank(a.outcome) else out.improved).append((a, b))
        else:
            out.changed.append((a, b))
    return out


def render_diff(
    old_env: dict[str, Any], new_env: dict[str, Any], diff: RunDiff, left: list[str] | None = None
) -> str:
    """left: why the removed cells left (conformance.report.left.render_left); given, it stands
    for the list of removed cells."""

    rows = []
    for key in sorted(set(old_env) | set(new_env)):
        a, b = old_env.get(key), new_env.get(key)
        mark = "" if a == b or key in VOLATILE else "*"
        rows.append([mark, key, _short(a), _short(b)])
    lines = [
        "Run metadata (* marks a difference):",
        tabulate(rows, headers=["", "field", "old", "new"], tablefmt="simple"),
        "",
        f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.improved)} improved, "
        f"{len(diff.regressed)} regressed, {len(diff.changed)} otherwise changed",
    ]
    sections = (
        ("Regressed", diff.regressed),
        ("Otherwise changed", diff.changed),
        ("Improved", diff.improved),
    )
    for title, pairs in sections:
        if pairs:
            lines += ["", f"{title}:"]
            lines += [f"  {a.id}: {a.outcome} -> {b.outcome}: {first_line(b.detail)}" for a, b in pairs]
    if left is not None:
        lines += left
    listed = [("Removed", diff.removed), ("Added", diff.added)]
    if left is not None:  # a covering's diff: thousands of cells; the ones that did not pass
        passed = sum(c.outcome is Outcome.PASS for c in diff.added)
        listed = [
            (
                f"Added ({passed} more passing, not listed)",
                [c for c in diff.added if c.outcome is not Outcome.PASS],
            )
        ]
    for title, cells in listed:
        if cells:
            lines += ["", f"{title}:"]
            lines += [f"  {c.id}: {c.outcome}" for c in cells]
    return "\n".join(lines) + "\n"


def _short(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."

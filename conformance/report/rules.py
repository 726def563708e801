"""Unsupported is a rule, not a row. The cells a profile declares that are unsupported by design
never ran and say nothing a rule does not: a published run keeps them as counts per (check,
reason) in its metadata, `environment.unsupported.rules`, and as the feature-table answers they
give, `environment.unsupported.answers` ((table row, feature, reason) where no cell of the run
answers), so the tables still say `unsupported` there and not `unknown`. results.json, the
baseline and the HTML list only the cells that ran or were skipped. `python -m conformance
diff` compares the counts per rule; a cell that moved between supported and unsupported is
added or removed there."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from conformance.outcome import CellResult, Outcome
from conformance.report.tables import RULE_FEATURE, RULE_NA, RULE_ROW, RULE_UNKNOWN, check_of, feature_cells


def fold(cells: Iterable[CellResult]) -> tuple[list[CellResult], dict[str, Any]]:
    """The cells to publish (every one but the unsupported), and what the unsupported ones say:
    {"cells": n, "rules": [{check, reason, cells}], "answers": [[row, feature, reason]]}."""
    cells = list(cells)
    kept = [c for c in cells if c.outcome is not Outcome.UNSUPPORTED]
    gone = [c for c in cells if c.outcome is Outcome.UNSUPPORTED and RULE_ROW not in c.axes]
    counts = Counter((check_of(c), c.detail) for c in gone)
    answered = set(feature_cells(kept))
    answers = sorted(
        (row, feature, tested[0].detail)
        for (row, feature), tested in feature_cells(gone).items()
        if (row, feature) not in answered
    )
    return kept, {
        "cells": len(gone),
        "rules": [
            {"check": check, "reason": reason, "cells": n} for (check, reason), n in sorted(counts.items())
        ],
        "answers": [list(answer) for answer in answers],
    }


def folded_into(
    environment: dict[str, Any], cells: list[CellResult]
) -> tuple[dict[str, Any], list[CellResult]]:
    """A run's metadata and cells with its unsupported cells folded into rules (a results.json
    written before the fold has them as rows; one written after has nothing to fold)."""
    if not any(c.outcome is Outcome.UNSUPPORTED for c in cells):
        return environment, cells
    kept, rules = fold(cells)
    before = environment.get("unsupported") or {"cells": 0, "rules": [], "answers": []}
    merged = _merge(before, rules)
    return {**environment, "unsupported": merged}, kept


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    counts: Counter[tuple[str, str]] = Counter()
    for part in (a, b):
        for rule in part.get("rules", []):
            counts[(rule["check"], rule["reason"])] += rule["cells"]
    answers = {tuple(x) for part in (a, b) for x in part.get("answers", [])}
    return {
        "cells": a.get("cells", 0) + b.get("cells", 0),
        "rules": [{"check": c, "reason": r, "cells": n} for (c, r), n in sorted(counts.items())],
        "answers": [list(x) for x in sorted(answers)],
    }


def ruled_cells(environment: dict[str, Any]) -> list[CellResult]:
    """Stand-ins for the feature-table answers the folded cells gave: one per (row, feature),
    for the feature tables only (tables.feature_cells reads them); the renderers pass them to
    those tables and nowhere else. A published table's answers from the full declaration
    (report.applicable) stand in the same way: n/a, and a debt (unknown)."""
    folded = (environment.get("unsupported") or {}).get("answers", [])
    answered = environment.get("not_applicable") or {}
    debt = "the full declaration has a supported cell for it, which this profile did not run"
    return [
        *(_stand_in("rule", row, feature, reason) for row, feature, reason in folded),
        *(
            _stand_in("n/a", row, feature, reason, RULE_NA)
            for row, feature, reason in answered.get("answers", [])
        ),
        *(
            _stand_in("unknown", row, feature, debt, RULE_UNKNOWN)
            for row, feature in answered.get("unknown", [])
        ),
    ]


def _stand_in(kind: str, row: str, feature: str, reason: str, marker: str = "") -> CellResult:
    """A feature-table answer without a cell: `kind` leads its id, `marker` (an axis) says what it is."""
    axes: dict[str, Any] = {RULE_ROW: row, RULE_FEATURE: feature}
    if marker:
        axes[marker] = True
    return CellResult(f"{kind}:{row}:{feature}", axes, Outcome.UNSUPPORTED, reason, 0.0)


def rule_counts(environment: dict[str, Any], cells: list[CellResult]) -> Counter[tuple[str, str]]:
    """(check, reason) -> unsupported cells, from the metadata and any unfolded rows."""
    counts: Counter[tuple[str, str]] = Counter()
    for rule in (environment.get("unsupported") or {}).get("rules", []):
        counts[(rule["check"], rule["reason"])] += rule["cells"]
    for cell in cells:
        if cell.outcome is Outcome.UNSUPPORTED and RULE_ROW not in cell.axes:
            counts[(check_of(cell), cell.detail)] += 1
    return counts


def render_rule_changes(
    old_env: dict[str, Any], old: list[CellResult], new_env: dict[str, Any], new: list[CellResult]
) -> list[str]:
    """The diff's lines for the rules whose count of unsupported cells changed (a cell moved
    between supported and unsupported, or the profile declares other cells)."""
    before, after = rule_counts(old_env, old), rule_counts(new_env, new)
    changed = sorted(k for k in before.keys() | after.keys() if before[k] != after[k])
    if not changed:
        return []
    lines = [
        "",
        f"Unsupported cells per rule ({sum(before.values())} -> {sum(after.values())}), where the count changed:",
    ]
    lines += [
        f"  {check}: {before[(check, r)]} -> {after[(check, r)]}: {r.splitlines()[0] if r else ''}"
        for check, r in changed[:40]
    ]
    if len(changed) > 40:
        lines.append(f"  ... {len(changed) - 40} more rules")
    return lines

"""The Markdown matrix: one row per strategy, one column per world size, then every non-pass."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tabulate import tabulate

from conformance.outcome import CellResult, Outcome

SYMBOLS: dict[Outcome, str] = {
    Outcome.PASS: "pass",
    Outcome.FAIL: "**FAIL**",
    Outcome.ERROR: "**ERROR**",
    Outcome.CRASH: "**CRASH**",
    Outcome.HANG: "**HANG**",
    Outcome.SKIP: "skip",
    Outcome.UNSUPPORTED: "unsupported",
}

LEGEND = (
    "pass: every compared value bitwise equal after the round trip. "
    "FAIL: a difference (see below). ERROR: an exception on some rank. "
    "CRASH: a rank died (signal or exit code). HANG: over the cell timeout. "
    "skip: cannot run in this environment. unsupported: not supported by design, never a pass. "
    "Buffers: the gathered state holds rank 0's copy; every rank's own copy is compared on that rank."
)


def _row_key(axes: dict[str, Any]) -> tuple[str, ...]:
    return tuple(
        str(axes[k])
        for k in (
            "wrapper",
            "sharding",
            "api",
            "kind",
            "storage",
            "optimizer",
            "model",
            "precision",
        )
    )


def first_line(detail: str) -> str:
    for line in detail.splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "rank ", "---", "File ")):
            return line[:200]
    return detail.strip().splitlines()[0][:200] if detail.strip() else ""


def render_markdown(environment: dict[str, Any], cells: list[CellResult]) -> str:
    sizes = sorted({int(c.axes["world_size"]) for c in cells})
    rows: dict[tuple[str, ...], dict[int, CellResult]] = defaultdict(dict)
    for cell in cells:
        rows[_row_key(cell.axes)][int(cell.axes["world_size"])] = cell
    headers = ["wrapper", "sharding", "api", "kind", "storage", "optimizer", "model", "precision"]
    table = []
    for key in sorted(rows):
        by_size = rows[key]
        table.append([*key, *(SYMBOLS[by_size[s].outcome] if s in by_size else "" for s in sizes)])
    counts: dict[str, int] = defaultdict(int)
    for cell in cells:
        counts[cell.outcome.value] += 1
    env = environment
    lines = [
        f"# Checkpoint conformance: torch {env.get('torch')} on {env.get('backend')} ({env.get('device')})",
        "",
        f"Matrix `{env.get('matrix')}`, {len(cells)} cells, run {env.get('time_utc')}, "
        f"suite {env.get('suite_version')} ({(env.get('suite_commit') or 'unknown')[:12]}), "
        f"Python {env.get('python')}, {env.get('platform')}.",
        "",
        "Outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        "",
        tabulate(table, headers=[*headers, *(f"w{s}" for s in sizes)], tablefmt="github"),
        "",
        LEGEND,
        "",
    ]
    others = [c for c in sorted(cells, key=lambda c: c.id) if c.outcome is not Outcome.PASS]
    if others:
        lines += ["## Cells that did not pass", ""]
        lines += [f"- `{c.id}`: {c.outcome.value}: {first_line(c.detail)}" for c in others]
        lines.append("")
    return "\n".join(lines)

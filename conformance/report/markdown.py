"""The Markdown matrix: one row per strategy, one column per world size, then every non-pass."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from tabulate import tabulate

from conformance.outcome import FAILING, CellResult, Outcome

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
    "An empty cell: that world size is not in this profile for the row. "
    "Buffers (per rank under FSDP): after a load from one rank-0 file every rank must hold rank 0's copy; "
    "from per-rank files its own; from DCP the one copy DCP kept."
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


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")


def first_line(detail: str) -> str:
    """The line of a detail a person reads first: the exception of the originating rank, the
    first difference of a fail, or the crash's cause."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0]
    if head.startswith("rank ") and " raised " in head:
        # The last exception line of the originating rank's block: for a plain traceback the
        # exception itself, for a wrapper (DCP's CheckpointException) the error it carries.
        found = None
        for line in lines[1:]:
            if line.startswith("--- "):
                break
            if _EXCEPTION_LINE.match(line):
                found = line
        if found:
            return f"{head.split(' raised ')[0]}: {found}"[:240]
    if head.endswith("differences after the round trip:") and len(lines) > 1:
        return f"{head} {lines[1]}"[:240]
    return head[:240]


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
    ordered = sorted(cells, key=lambda c: c.id)
    problems = [c for c in ordered if c.outcome in FAILING]
    if problems:
        lines += ["## Cells that did not pass", ""]
        lines += [f"- `{c.id}`: {c.outcome.value}: {first_line(c.detail)}" for c in problems]
        lines.append("")
    reasons: dict[tuple[str, str], list[str]] = defaultdict(list)
    for c in ordered:
        if c.outcome in (Outcome.SKIP, Outcome.UNSUPPORTED):
            reasons[(c.outcome.value, c.detail)].append(c.id)
    if reasons:
        lines += ["## Unsupported and skipped cells", ""]
        for (outcome, reason), ids in sorted(reasons.items()):
            lines.append(f"- {outcome} ({len(ids)} cells): {reason}")
        lines.append("")
    return "\n".join(lines)

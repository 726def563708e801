"""The Markdown matrix: one row per strategy, one column per world size, then every non-pass."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
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
    "refused (reshard, interop): cannot load by design, and the load raised, as it must (counted as passed). "
    "known <outcome>: a failure the baseline expects (its reason and link are in the list below). "
    "An empty cell: that column is not in this profile for the row. [passed/run]: passes of the cells "
    "that ran (unsupported and skipped cells are not counted either way). "
    "Buffers (per rank under FSDP): after a load from one rank-0 file every rank must hold rank 0's copy; "
    "from per-rank files its own; from DCP the one copy DCP kept."
)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")


def first_line(detail: str) -> str:
    """The line of a detail a person reads first: the exception of the originating rank, the
    first difference of a fail, or the crash's cause."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    if not lines:
        return ""
    head, phase = lines[0], ""
    if head.startswith("[") and "] " in head:  # a phase of a multi-phase check: "[load phase, 2 ranks] ..."
        phase, head = head.split("] ", 1)
        phase += "] "
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
            return f"{phase}{head.split(' raised ')[0]}: {found}"[:240]
    if head.endswith(":") and "differences" in head and len(lines) > 1:
        return f"{phase}{head} {lines[1]}"[:240]
    return f"{phase}{head}"[:240]


REFUSED = "refused, as it must"  # how a transfer that cannot load by design and raised begins

CHECK_TITLES = {
    "roundtrip": "Round trip: save, load into a fresh model, compare",
    "resume": "Resume: the resumed run continues bitwise as the run it was saved from",
    "reshard": "Resharding: saved in N ranks, loaded in a separate world of M",
    "interop": "Interop: saved by the row's configuration, loaded by the column's",
    "hygiene": "Key hygiene: the full checkpoint loads strict=True into the plain model",
    "corrupt": "Bad checkpoints: the load must raise",
}
HEADERS = ["wrapper", "sharding", "api", "kind", "storage", "optimizer", "model", "precision"]


def _symbol(cell: CellResult | None, known: Mapping[str, Any]) -> str:
    if cell is None:
        return ""
    if cell.id in known:
        return f"known {cell.outcome.value}"
    if cell.outcome is Outcome.PASS and cell.detail.startswith(REFUSED):
        return "refused"
    return SYMBOLS[cell.outcome]


def _grid(
    cells: list[CellResult], row: Any, column: Any, row_headers: list[str], known: Mapping[str, Any]
) -> str:
    """A table of cells by (row key, column key), with [passed/total] per row and column."""
    rows: dict[tuple[str, ...], dict[str, CellResult]] = defaultdict(dict)
    for cell in cells:
        rows[row(cell)][column(cell)] = cell
    columns = sorted({column(c) for c in cells})
    table = []
    for key in sorted(rows):
        by_col = rows[key]
        ran = [c for c in by_col.values() if c.outcome not in (Outcome.SKIP, Outcome.UNSUPPORTED)]
        passed = sum(c.outcome is Outcome.PASS for c in ran)
        table.append([*key, *(_symbol(by_col.get(col), known) for col in columns), f"[{passed}/{len(ran)}]"])
    totals = []
    for col in columns:
        ran = [
            r[col]
            for r in rows.values()
            if col in r and r[col].outcome not in (Outcome.SKIP, Outcome.UNSUPPORTED)
        ]
        totals.append(f"[{sum(c.outcome is Outcome.PASS for c in ran)}/{len(ran)}]")
    table.append(["" for _ in row_headers[:-1]] + ["passed/run", *totals, ""])
    return tabulate(table, headers=[*row_headers, *columns, "passed/run"], tablefmt="github")


def _section(check: str, cells: list[CellResult], known: Mapping[str, Any]) -> str:
    if check == "reshard":
        return _grid(
            cells,
            lambda c: tuple(str(c.axes[k]) for k in ("wrapper", "sharding", "api", "storage")),
            lambda c: f"w{c.axes['save_world_size']} to w{c.axes['load_world_size']}",
            ["wrapper", "sharding", "api", "storage"],
            known,
        )
    if check == "interop":
        return _grid(
            cells,
            lambda c: (f"{c.axes['wrapper']} {c.axes['api']} {c.axes['storage']} w{c.axes['world_size']}",),
            lambda c: str(c.axes["load_config"]),
            ["saved by \\ loaded by"],
            known,
        )
    extra = ["variant"] if any(c.axes.get("variant") for c in cells) else []
    keys = HEADERS + extra
    return _grid(
        cells,
        lambda c: tuple(str(c.axes.get(k, "")) for k in keys),
        lambda c: f"w{c.axes['world_size']}",
        keys,
        known,
    )


def render_markdown(
    environment: dict[str, Any], cells: list[CellResult], known: Mapping[str, Any] | None = None
) -> str:
    """`known`: cell id -> baseline.Expectation of the failures a baseline expects."""
    known = known or {}
    by_check: dict[str, list[CellResult]] = defaultdict(list)
    for cell in cells:
        by_check[str(cell.axes.get("check", "roundtrip"))].append(cell)
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
        LEGEND,
        "",
    ]
    for check in [c for c in CHECK_TITLES if c in by_check] + sorted(set(by_check) - set(CHECK_TITLES)):
        lines += [f"## {CHECK_TITLES.get(check, check)}", "", _section(check, by_check[check], known), ""]
    ordered = sorted(cells, key=lambda c: c.id)
    problems = [c for c in ordered if c.outcome in FAILING]
    if problems:
        lines += ["## Cells that did not pass", ""]
        for c in problems:
            entry = known.get(c.id)
            tag = (
                f"known {c.outcome.value} ({entry.reason}{', ' + entry.link if entry.link else ''})"
                if entry
                else c.outcome.value
            )
            lines.append(f"- `{c.id}`: {tag}: {first_line(c.detail)}")
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

"""The Markdown matrix: the feature x strategy table, a grid per check (one row per strategy, one
column per world size; interop the square save x load grid), then every non-pass."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from tabulate import tabulate

from conformance.check.registry import CHECKS
from conformance.findings import Finding, explaining
from conformance.outcome import FAILING, NEVER_EXPECTED, CellResult, Outcome, first_line
from conformance.report.tables import (
    NO_FEATURE_CELLS,
    SUPPORT_WORDS,
    Table,
    check_table,
    config,
    feature_table,
    features,
    summary_table,
)

LEGEND = (
    "pass: every compared value bitwise equal after the round trip. "
    "FAIL: a difference (see below). ERROR: the strategy's calls raised on some rank. "
    "HARNESS-ERROR: the suite's own code raised, a fault of the suite and no result (listed first, "
    "never expected by a baseline, counted neither way; the feature word is 'harness error'). "
    "CRASH: a rank died (signal or exit code). HANG: over the cell timeout. "
    "skip: cannot run in this environment. unsupported: not supported by design, never a pass. "
    "refused (reshard, interop): cannot load by design, and the load raised, as it must (counted as passed). "
    "known <outcome>: a failure the baseline expects (its reason and link are in the list below). "
    "unknown (feature table): nothing of this run tests it, never a no. "
    "An empty cell: that column is not in this profile for the row. [passed/run]: passes of the cells "
    "that ran (unsupported and skipped cells are not counted either way). "
    "Buffers (per rank under FSDP, not synced): after a load every rank must hold, bitwise, one rank's "
    "saved copy (from one rank-0 file that is rank 0's, from per-rank files its own, from DCP the copy DCP "
    "kept); the same rule for every strategy, built-in or registered."
)


def _markdown(table: Table) -> str:
    """A table of words, the failing ones in bold."""
    headers, rows = table
    bold = {o.value for o in FAILING} | {"no"}
    shown = [[f"**{v.upper()}**" if v in bold else v for v in row] for row in rows]
    return tabulate(shown, headers=headers, tablefmt="github")


def _deprecated(cells: list[CellResult], findings: list[Finding]) -> set[str]:
    """The strategies (feature-table rows) whose cells call a deprecated API (a finding says)."""
    marked = [f for f in findings if f.kind == "deprecated API"]
    return {config(c) for c in cells if any(f.explains(c) for f in marked)}


def _summary(cells: list[CellResult], known: Mapping[str, Any]) -> list[str]:
    (headers, rows), folded = summary_table(cells, known)
    if not rows and not folded:
        return []
    lines = [
        "## What works",
        "",
        "A row per wrapper family and state-dict API (a registered strategy and its kind), each "
        "feature over every storage, sharding and option of it; the full table, a row per "
        "strategy, follows.",
        "",
        _markdown((headers, rows)) if rows else "(nothing ran)",
        "",
    ]
    if folded:
        lines += [
            f"Nothing ran for {len(folded)} rows (unsupported, skipped or untested): {', '.join(folded)}.",
            "",
        ]
    return lines


def _features(cells: list[CellResult], known: Mapping[str, Any], findings: list[Finding]) -> list[str]:
    headers, rows = feature_table(cells, known)
    deprecated = _deprecated(cells, findings)
    table = (headers, [[f"{r[0]} (deprecated API)" if r[0] in deprecated else r[0], *r[1:]] for r in rows])
    return [
        "## Features by strategy",
        "",
        "One row per strategy (wrapper, state-dict API, storage), one column per feature, over the "
        "cells of this run that test it: "
        + "; ".join(f"{w}: {m}" for w, m in SUPPORT_WORDS.items())
        + ". The features: "
        + "; ".join(f"{f.name}: {f.meaning}" for _, f in features())
        + ".",
        "",
        _markdown(table) if table[1] else NO_FEATURE_CELLS,
        "",
    ]


def harness_errors(cells: list[CellResult]) -> list[str]:
    """The section that comes first when the suite itself failed: these cells have no result."""
    faults = sorted((c for c in cells if c.outcome in NEVER_EXPECTED), key=lambda c: c.id)
    if not faults:
        return []
    return [
        "## Harness errors: faults of this suite, not results",
        "",
        f"{len(faults)} cells did not get a verdict: the suite's own code raised (training, reading "
        "or comparing the state, the world's plumbing), not the strategy's calls. They fail every "
        "run whatever the baseline says and count neither way in the tables below.",
        "",
        *(f"- `{c.id}`: {first_line(c.detail)}" for c in faults),
        "",
    ]


def warm_world_reruns(results: list[CellResult]) -> list[CellResult]:
    """The cells (a property: an example) that hung in a warm world and were run again in a
    fresh one (conformance.world.pool): their outcome is the fresh run's, and the reports say
    which they are, since a hang that needs a warm world points at leftovers of earlier cells."""
    return [r for r in results if r.hung_in_a_warm_world]


def render_markdown(
    environment: dict[str, Any],
    cells: list[CellResult],
    known: Mapping[str, Any] | None = None,
    findings: list[Finding] | None = None,
) -> str:
    """`known`: cell id -> baseline.Expectation of the failures a baseline expects; `findings`:
    what explains the non-passes (FINDINGS.md beside this file)."""
    known = known or {}
    findings = findings or []
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
    if findings:
        lines += [
            "What each non-pass is (bug, documented limitation, deprecated API, pitfall), with its "
            "upstream record and a reproduction without this suite: [FINDINGS.md](FINDINGS.md).",
            "",
        ]
    lines += harness_errors(cells)
    lines += _summary(cells, known)
    lines += _features(cells, known, findings)
    titles = {name: check.title for name, check in CHECKS.items()}  # their order is the report's
    for check in [c for c in titles if c in by_check] + sorted(set(by_check) - set(titles)):
        table = _markdown(check_table(check, by_check[check], known))
        lines += [f"## {titles.get(check, check)}", "", table, ""]
    ordered = sorted(cells, key=lambda c: c.id)
    problems = [c for c in ordered if c.outcome in FAILING and c.outcome not in NEVER_EXPECTED]
    if problems:
        lines += ["## Cells that did not pass", ""]
        for c in problems:
            entry = known.get(c.id)
            tag = (
                f"known {c.outcome.value} ({entry.reason}{', ' + entry.link if entry.link else ''})"
                if entry
                else c.outcome.value
            )
            why = "".join(f" [{f.kind}: {f.id}]" for f in explaining(c, findings))
            lines.append(f"- `{c.id}`: {tag}{why}: {first_line(c.detail)}")
        lines.append("")
    reruns = warm_world_reruns(ordered)
    if reruns:
        lines += [
            "## Cells that hung in a warm world",
            "",
            "Each ran again in a fresh world, and that run is its outcome above; the warm world's "
            "stacks are at the end of its detail in results.json. A hang that needs a warm world "
            "points at something an earlier cell left behind.",
            "",
        ]
        lines += [f"- `{c.id}`: {c.outcome.value}: {c.detail.splitlines()[0]}" for c in reruns]
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

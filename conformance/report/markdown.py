"""The Markdown matrix, a summary a code host renders (well under 500 KB): what works, the
feature x strategy table (how bad each "no" is, the finding one click away), the findings with
their counts, the non-passes grouped by finding, and every difference no finding explains. The
grid per check and every cell's detail live in matrix.html and results.json."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from conformance.findings import Finding
from conformance.observed import IMPACTS
from conformance.outcome import NEVER_EXPECTED, CellResult, Outcome, first_line
from conformance.report.environment import cpu_words, partial_sentences, supplement_sentences
from conformance.report.impact import Judged, judge_cells
from conformance.report.rules import ruled_cells
from conformance.report.summary_md import (
    checks_section,
    findings_section,
    known_section,
    link_targets,
    pipe_table,
    table_word,
)
from conformance.report.tables import (
    NO_FEATURE_CELLS,
    NOTHING_RAN,
    RULE_NA,
    SUPPORT_WORDS,
    config,
    feature_table,
    features,
    one_cause_rows,
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


def _profile(env: dict[str, Any]) -> list[str]:
    """What the profile selects (the strength a covering profile covers), when the run says."""
    profile = env.get("profile")
    if not profile:
        return []
    lines = [f"The profile `{env.get('matrix')}`: {profile['description']}."]
    if profile.get("covering"):
        lines.append(
            f"Its cells cover {profile['covering']}: a sample of each table row's cells, so a word "
            "below is over the cells that ran (one cell per row and feature at least, a cell a "
            "finding names first); the declaration's product (`--matrix "
            f"{profile.get('declares', 'default')}-product`) or `full` runs every cell."
        )
    return [" ".join(lines), ""]


def _rules(env: dict[str, Any]) -> list[str]:
    """The unsupported cells the run folded into rules (report.rules), counted per reason."""
    folded = env.get("unsupported") or {}
    if not folded.get("cells"):
        return []
    by_reason: dict[str, int] = {}
    for rule in folded["rules"]:
        by_reason[rule["reason"]] = by_reason.get(rule["reason"], 0) + rule["cells"]
    lines = [
        f"Unsupported by design, not rows: {folded['cells']} cells of the profile's declaration, "
        f"under {len(by_reason)} reasons (the most cells first; every rule with its check in "
        "results.json, `environment.unsupported`):",
        "",
    ]
    top = sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))
    lines += [f"- {n}: {first_line(reason)}" for reason, n in top[:12]]
    if len(top) > 12:
        lines.append(f"- ... {len(top) - 12} more reasons, {sum(n for _, n in top[12:])} cells")
    return [*lines, ""]


def _cost(env: dict[str, Any]) -> list[str]:
    """What the run cost, when the run metadata says (older tables do not)."""
    run = env.get("run") or {}
    if "wall_s" not in run:
        return []
    workers = run.get("workers") or 0
    how = f"{workers} pytest-xdist workers" if workers else "one process"
    return [f"The run took {run['wall_s'] / 60:.1f} min of wall time on {how}.", ""]


def _deprecated(cells: list[CellResult], findings: list[Finding]) -> set[str]:
    """The strategies (feature-table rows) whose cells call a deprecated API (a finding says)."""
    marked = [f for f in findings if f.marks]
    return {config(c) for c in cells if any(f.covers(c) for f in marked)}


def _summary(cells: list[CellResult], known: Mapping[str, Any], judged: Mapping[str, Judged]) -> list[str]:
    (headers, rows), folded = summary_table(cells, known, judged)
    single = one_cause_rows(cells, judged)
    if not rows and not folded and not single:
        return []
    lines = [
        "## What works",
        "",
        "A row per wrapper family and state-dict API (a registered strategy and its kind), each "
        "feature over every storage, sharding and option of it; the full table, a row per "
        "strategy, follows. Where a feature fails, the word is how bad the worst difference is "
        "(worst first: " + ", ".join(IMPACTS) + "), and links to the finding behind it.",
        "",
        pipe_table((headers, rows)) if rows else "(nothing ran)",
        "",
    ]
    if single:
        lines += ["Rows whose every cell that ran fails on one cause:", ""]
        for group, (ran, bad) in sorted(single.items()):
            where = f", {bad.scope}" if bad.scope and bad.scope != "all devices" else ""
            lines.append(
                f"- {group}: all {ran} cells that ran: {table_word(f'{bad.impact}{where} [{bad.finding}]')} "
                f"(`{bad.finding}`)"
            )
        lines.append("")
    if folded:
        lines += [
            f"Nothing ran for {len(folded)} rows (unsupported, skipped or untested): {', '.join(folded)}.",
            "",
        ]
    return lines


def _features(
    cells: list[CellResult],
    known: Mapping[str, Any],
    findings: list[Finding],
    judged: Mapping[str, Judged],
    ruled: list[CellResult],
) -> list[str]:
    """ruled: the answers of folded unsupported cells (report.rules.ruled_cells), for the table."""
    headers, rows = feature_table(cells + ruled, known, judged)
    deprecated = _deprecated(cells, findings)
    ran = [r for r in rows if not all(w in NOTHING_RAN for w in r[1:])]
    idle = sorted(r[0] for r in rows if all(w in NOTHING_RAN for w in r[1:]))
    table = (headers, [[f"{r[0]} (deprecated API)" if r[0] in deprecated else r[0], *r[1:]] for r in ran])
    lines = [
        "## Features by strategy",
        "",
        "One row per strategy (wrapper, state-dict API, storage), one column per feature, over the "
        "cells of this run that test it: "
        + "; ".join(f"{w}: {m}" for w, m in SUPPORT_WORDS.items())
        + ". The features: "
        + "; ".join(f"{f.name}: {f.meaning}" for _, f in features())
        + ".",
        "",
        pipe_table(table, tight=True) if table[1] else NO_FEATURE_CELLS,
        "",
    ]
    if idle:
        lines += [
            f"Nothing ran for {len(idle)} strategies (unsupported, skipped or untested): {', '.join(idle)}.",
            "",
        ]
    return lines + _left_unknown(rows, any(c.axes.get(RULE_NA) for c in ruled))


def _left_unknown(rows: list[list[str]], answered_na: bool) -> list[str]:
    """How many entries the profile left unknown, and what answers them."""
    words = [w for r in rows for w in r[1:]]
    unknown, na = words.count("unknown"), words.count("n/a")
    if not answered_na:
        return [
            f"{unknown} entries are unknown: this run has no cell for them. A published table tells "
            "those the full declaration supports (still unknown) from those it cannot have (n/a): "
            "`python -m conformance render --na results.json`.",
            "",
        ]
    return [
        f"{unknown} entries are unknown: the full declaration has a supported cell for each, which "
        "this profile did not run (`pytest cases --matrix full -k <row>` answers one; "
        "`python -m conformance publish --matrix full`, every one). "
        f"{na} are n/a: no supported cell of the full declaration has them (the reasons: matrix.html's "
        '"n/a: why", and results.json\'s `environment.not_applicable`).',
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
    counts: dict[str, int] = defaultdict(int)
    for cell in cells:
        counts[cell.outcome.value] += 1
    env = environment
    lines = [
        f"# Checkpoint conformance: torch {env.get('torch')} on {env.get('backend')} ({env.get('device')})",
        "",
        f"Matrix `{env.get('matrix')}`, {len(cells)} cells, run {env.get('time_utc')}, "
        f"suite {env.get('suite_version')} ({(env.get('suite_commit') or 'unknown')[:12]}), "
        f"Python {env.get('python')}, "
        + ", ".join(filter(None, (str(env.get("platform")), cpu_words(env))))
        + ".",
        "",
        *(line for sentence in partial_sentences(env) for line in (f"**{sentence}**", "")),
        *_profile(env),
        *_cost(env),
        *(line for sentence in supplement_sentences(env) for line in (sentence, "")),
        "Outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        "",
        *_rules(env),
        LEGEND,
        "",
    ]
    if findings:
        lines += [
            "What each non-pass is (bug, documented limitation, deprecated API, pitfall), with its "
            "upstream record and a reproduction without this suite: [FINDINGS.md](FINDINGS.md).",
            "",
        ]
    judged = judge_cells(cells, findings)
    lines += harness_errors(cells)
    ruled = ruled_cells(env)
    lines += _summary(cells + ruled, known, judged)
    described = env.get("strategy_descriptions") or {}
    if described:
        lines += ["Registered strategies (rows of their own):", ""]
        lines += [f"- `{name}`: {text}" for name, text in sorted(described.items())]
        lines.append("")
    lines += _features(cells, known, findings, judged, ruled)
    lines += findings_section(cells, findings, judged)
    ordered = sorted(cells, key=lambda c: c.id)
    lines += checks_section(cells)
    lines += known_section(ordered, known)
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
    lines += [
        "The grid of every check (a row per strategy, a column per world size; interop the square "
        "save x load grid) and every cell with its detail and repro command: [matrix.html](matrix.html) "
        "and results.json.",
        "",
    ]
    reasons: dict[tuple[str, str], list[str]] = defaultdict(list)
    for c in ordered:
        if c.outcome in (Outcome.SKIP, Outcome.UNSUPPORTED):
            reasons[(c.outcome.value, c.detail)].append(c.id)
    if reasons:
        lines += ["## Unsupported and skipped cells", ""]
        for (outcome, reason), ids in sorted(reasons.items()):
            lines.append(f"- {outcome} ({len(ids)} cells): {reason}")
        lines.append("")
    targets = link_targets("\n".join(lines))
    return "\n".join([*lines, *targets, ""] if targets else lines)

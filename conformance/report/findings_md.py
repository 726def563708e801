"""FINDINGS.md: the findings data (reports/findings.toml) over one run's cells, beside its
results: per finding its class, what it is, its upstream record, the torch versions it was
seen on, the command that reproduces it without this suite, and the cells of this run it
explains; then every non-pass that no finding explains, which is work left to do."""

from __future__ import annotations

from typing import Any

from conformance.findings import CLASSES, Finding, explaining
from conformance.outcome import FAILING, NEVER_EXPECTED, CellResult

SHOWN_OPEN = 8  # more cells than this go in a folded list


def _cells(cells: list[CellResult]) -> list[str]:
    listed = [f"  - `{c.id}`: {c.outcome.value}" for c in cells]
    if len(cells) <= SHOWN_OPEN:
        return listed
    return ["", "<details><summary>the cells</summary>", "", *listed, "", "</details>"]


def _finding(finding: Finding, cells: list[CellResult]) -> list[str]:
    lines = [f"### {finding.title}", "", f"`{finding.id}`, {finding.kind}. {finding.summary}", ""]
    status = [", ".join(finding.upstream), finding.upstream_status]
    if any(status):
        lines.append("- upstream: " + "; ".join(part for part in status if part))
    if finding.torch:
        lines.append(f"- seen on torch {', '.join(finding.torch)}")
    if finding.repro:
        needs = f" (needs {', '.join(finding.frameworks)})" if finding.frameworks else ""
        lines.append(
            f"- reproduce without this suite: `python {finding.repro}`{needs}; exits 1 while the bug is present"
        )
    lines.append(f"- cells of this run it explains: {len(cells)}")
    return [*lines, *_cells(cells), ""]


def render_findings(env: dict[str, Any], cells: list[CellResult], findings: list[Finding]) -> str:
    explained: dict[str, list[CellResult]] = {f.id: [] for f in findings}
    unexplained = []
    for cell in sorted(cells, key=lambda c: c.id):
        matches = explaining(cell, findings)
        for f in matches:
            explained[f.id].append(cell)
        if not matches and cell.outcome in FAILING and cell.outcome not in NEVER_EXPECTED:
            unexplained.append(cell)
    lines = [
        f"# Findings: torch {env.get('torch')} on {env.get('backend')} ({env.get('device')})",
        "",
        f"What the non-passes of `results.json` beside this file are (matrix `{env.get('matrix')}`, "
        f"{len(cells)} cells), from `reports/findings.toml`. Classes: "
        + "; ".join(f"**{k}**: {v}" for k, v in CLASSES.items())
        + ".",
        "",
    ]
    for kind in CLASSES:
        of_kind = [f for f in findings if f.kind == kind]
        if of_kind:
            lines += [f"## {kind[0].upper()}{kind[1:]}s", ""]
            for finding in of_kind:
                lines += _finding(finding, explained[finding.id])
    lines += ["## Non-passes no finding explains", ""]
    if unexplained:
        lines += [f"{len(unexplained)} cells: each needs a finding, or a fix.", "", *_cells(unexplained)]
    else:
        lines.append("None: every failure, error, crash and hang of this run is explained above.")
    harness = [c for c in cells if c.outcome in NEVER_EXPECTED]
    if harness:
        lines += ["", f"{len(harness)} harness errors are faults of this suite, not findings: see matrix.md."]
    return "\n".join(lines) + "\n"

"""FINDINGS.md: the findings data (reports/findings.toml) over one run's cells, beside its
results: per finding its class, what it is, its upstream record, the torch versions it was
seen on, the command that reproduces it without this suite, and the cells of this run it
explains; then every non-pass that no finding explains, which is work left to do."""

from __future__ import annotations

from typing import Any

from conformance.findings import CLASSES, Finding, attribute
from conformance.observed import IMPACTS, Observed
from conformance.outcome import FAILING, NEVER_EXPECTED, CellResult
from conformance.report.tables import config

SHOWN_OPEN = 8  # more cells than this go in a folded list


def _cells(cells: list[CellResult]) -> list[str]:
    return _listed([f"  - `{c.id}`: {c.outcome.value}" for c in cells])


def _listed(listed: list[str]) -> list[str]:
    if len(listed) <= SHOWN_OPEN:
        return listed
    return ["", "<details><summary>the cells</summary>", "", *listed, "", "</details>"]


def _finding(finding: Finding, cells: list[CellResult]) -> list[str]:
    lines = [
        f'<a id="{finding.id}"></a>',
        "",
        f"### {finding.title}",
        "",
        f"`{finding.id}`, {finding.kind}. {finding.summary}",
        "",
    ]
    if finding.impact:
        lines.append(f"- impact: **{finding.impact}** ({IMPACTS[finding.impact]}); holds: {finding.scope}")
    status = [", ".join(finding.upstream), finding.upstream_status]
    if any(status):
        lines.append("- upstream: " + "; ".join(part for part in status if part))
    if finding.torch:
        lines.append(f"- seen on torch {', '.join(finding.torch)}")
    if finding.repro:
        needs = f" (needs {', '.join(finding.frameworks)})" if finding.frameworks else ""
        needs += f" under torch {finding.repro_torch}" if finding.repro_torch else ""
        lines.append(
            f"- reproduce without this suite: `python {finding.repro}`{needs}; exits 1 while the bug is present"
        )
    if finding.marks:  # the rows it marks, not thousands of cells
        rows = sorted({config(c) for c in cells})
        lines.append(f"- cells of this run it marks: {len(cells)}, in {len(rows)} strategy rows")
        return [*lines, *_listed([f"  - `{r}`" for r in rows]), ""]
    lines.append(f"- cells of this run it explains: {len(cells)}")
    return [*lines, *_cells(cells), ""]


def render_findings(env: dict[str, Any], cells: list[CellResult], findings: list[Finding]) -> str:
    explained: dict[str, list[CellResult]] = {f.id: [] for f in findings}
    unexplained: list[tuple[CellResult, list[Observed]]] = []
    for cell in sorted(cells, key=lambda c: c.id):
        attribution = attribute(cell, findings)
        for f in findings:
            if (f.marks and f.covers(cell)) or f in attribution.findings:
                explained[f.id].append(cell)
        if cell.outcome in FAILING and cell.outcome not in NEVER_EXPECTED and not attribution.explained:
            unexplained.append((cell, attribution.unexplained or cell.records))
    lines = [
        f"# Findings: torch {env.get('torch')} on {env.get('backend')} ({env.get('device')})",
        "",
        f"What the non-passes of `results.json` beside this file are (matrix `{env.get('matrix')}`, "
        f"{len(cells)} cells), from `reports/findings.toml`, matched difference by difference: a "
        "cell is explained when every difference and error it recorded is. Classes: "
        + "; ".join(f"**{k}**: {v}" for k, v in CLASSES.items())
        + ". Impacts, worst first: "
        + "; ".join(f"**{k}**: {v}" for k, v in IMPACTS.items())
        + ".",
        "",
    ]
    for kind in CLASSES:
        of_kind = [f for f in findings if f.kind == kind]
        if of_kind:
            lines += [f"## {kind[0].upper()}{kind[1:]}s", ""]
            for finding in of_kind:
                lines += _finding(finding, explained[finding.id])
    lines += ["## Differences no finding explains", ""]
    if unexplained:
        total = sum(len(records) for _, records in unexplained)
        lines += [
            f"{total} differences and errors in {len(unexplained)} cells: each needs a finding, or a fix.",
            "",
        ]
        for cell, records in unexplained:
            lines.append(f"- `{cell.id}` ({cell.outcome.value}):")
            lines += [f"  - {r.kind}: {r.line.splitlines()[0][:300]}" for r in records[:SHOWN_OPEN]]
            if len(records) > SHOWN_OPEN:
                lines.append(f"  - ... and {len(records) - SHOWN_OPEN} more (results.json)")
    else:
        lines.append("None: every difference and error of this run is explained above.")
    harness = [c for c in cells if c.outcome in NEVER_EXPECTED]
    if harness:
        lines += ["", f"{len(harness)} harness errors are faults of this suite, not findings: see matrix.md."]
    return "\n".join(lines) + "\n"

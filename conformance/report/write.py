"""Write a run's reports in one place: results.json, matrix.md and matrix.html, as the pytest
plugin and the torchrun launch both do."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from conformance.baseline import Baseline, known_failures
from conformance.findings import Finding, load_findings
from conformance.outcome import NEVER_EXPECTED, RERUN_NOTE, CellResult
from conformance.report.findings_md import render_findings
from conformance.report.html import render_html
from conformance.report.markdown import render_markdown, warm_world_reruns
from conformance.report.results import GZIPPED, RESULTS, results_document, write_results
from conformance.report.rules import folded_into


def outcome_summary(results: list[CellResult]) -> str:
    """ "N cells: 1 crash, 2 pass": the line a run ends with."""
    counts = Counter(r.outcome.value for r in results)
    first = [o.value for o in NEVER_EXPECTED if o.value in counts]  # the suite's own faults lead
    order = first + sorted(set(counts) - set(first))
    return f"{len(results)} cells: " + ", ".join(f"{counts[outcome]} {outcome}" for outcome in order)


def rerun_summary(results: list[CellResult]) -> str | None:
    """The line under the outcome summary that names them, or None."""
    reruns = warm_world_reruns(results)
    if not reruns:
        return None
    return f"{len(reruns)} {RERUN_NOTE} and ran again in a fresh one: " + ", ".join(r.id for r in reruns)


def write_reports(
    out: Path,
    env: dict[str, Any],
    results: list[CellResult],
    baseline: Baseline | None = None,
    findings: list[Finding] | None = None,
) -> None:
    """results.json, matrix.md, matrix.html, and FINDINGS.md when there are findings
    (default: reports/findings.toml of this checkout)."""
    env, results = folded_into(env, sorted(results, key=lambda r: r.id))
    findings = load_findings() if findings is None else findings
    write_results(out / RESULTS, results_document(env, results))
    (out / (RESULTS + GZIPPED)).unlink(missing_ok=True)  # a published table's older, gzipped one
    known = known_failures(results, baseline)
    (out / "matrix.md").write_text(render_markdown(env, results, known, findings))
    (out / "matrix.html").write_text(render_html(env, results, known, findings))
    if findings:
        (out / "FINDINGS.md").write_text(render_findings(env, results, findings))

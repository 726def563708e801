"""Write a run's reports in one place: results.json, matrix.md and matrix.html, as the pytest
plugin and the torchrun launch both do."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from conformance.baseline import Baseline, known_failures
from conformance.outcome import RERUN_NOTE, CellResult
from conformance.report.html import render_html
from conformance.report.markdown import render_markdown, warm_world_reruns
from conformance.report.results import results_document, write_results


def outcome_summary(results: list[CellResult]) -> str:
    """ "N cells: 1 crash, 2 pass": the line a run ends with."""
    counts = Counter(r.outcome.value for r in results)
    return f"{len(results)} cells: " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


def rerun_summary(results: list[CellResult]) -> str | None:
    """The line under the outcome summary that names them, or None."""
    reruns = warm_world_reruns(results)
    if not reruns:
        return None
    return f"{len(reruns)} {RERUN_NOTE} and ran again in a fresh one: " + ", ".join(r.id for r in reruns)


def write_reports(
    out: Path, env: dict[str, Any], results: list[CellResult], baseline: Baseline | None = None
) -> None:
    results = sorted(results, key=lambda r: r.id)
    write_results(out / "results.json", results_document(env, results))
    known = known_failures(results, baseline)
    (out / "matrix.md").write_text(render_markdown(env, results, known))
    (out / "matrix.html").write_text(render_html(env, results, known))

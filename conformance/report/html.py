"""One self-contained HTML page from results.json: no network access needed.

A row per cell, coloured by outcome, with a filter per axis (also settable from the URL:
`matrix.html?check=reshard&outcome=fail`), a legend, counts of passed / run per check, and
for every cell that did not pass its first error line and the command that reruns it.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from conformance.case import repro_command as command
from conformance.check.base import GridCells
from conformance.check.registry import CHECKS
from conformance.findings import Finding
from conformance.outcome import FAILING, CellResult, Outcome, first_line
from conformance.report import tables
from conformance.report.environment import partial_sentences, supplement_sentences
from conformance.report.impact import judge_cells
from conformance.report.rules import ruled_cells

FILTER_AXES = (
    "check",
    "outcome",
    "family",
    "wrapper",
    "sharding",
    "api",
    "kind",
    "storage",
    "model",
    "world_size",
)
COLOURS = {
    "pass": "#c8f0c8",
    "refused": "#dff3d0",
    "known": "#f3e3c4",
    "fail": "#f8c4c4",
    "error": "#f5a9a9",
    "crash": "#e88a8a",
    "hang": "#f0b27a",
    "skip": "#e6e6e6",
    "unsupported": "#d9d9f3",
    "harness-error": "#b0b0b0",
}
SUPPORT_COLOURS = {
    "yes": COLOURS["pass"],
    "partial": "#f6f0b0",
    "no": COLOURS["fail"],
    "unknown": "#ffffff",
    "na": "#f2f2f2",  # the word n/a (a class cannot hold the slash)
    "harness": COLOURS["harness-error"],  # the word "harness error": classes take its first word
    # how bad a "no" is (conformance.observed.IMPACTS), worst first
    "corrupts": "#e06666",
    "loses": "#ea9999",
    "drifts": "#fbe3a8",
    "diverges": "#fdf1cf",
    "refuses": "#f5c99b",
    "crashes": COLOURS["crash"],
    "hangs": COLOURS["hang"],
}
LEGEND = {
    "pass": "every compared value bitwise equal (or, for corrupt, the damaged load raised)",
    "refused": "reshard / interop: cannot load by design, and the load raised, as it must",
    "known": "a failure the baseline expects: its reason and link are shown",
    "fail": "ran, and something differs; the detail names key, rank, dtype and first index",
    "error": "the strategy's calls raised on some rank; the originating rank's error first",
    "harness-error": "the suite's own code raised: a fault of this suite, no verdict on the strategy",
    "crash": "a rank died (signal or exit code)",
    "hang": "over the cell timeout; every rank's stack is in the detail",
    "skip": "cannot run in this environment, with the reason",
    "unsupported": "not supported by design, with the reason; never counted as a pass",
    "unknown": "(feature table) nothing of this run tests it: not tested, which is never a no",
    "n/a": "(feature table, published) no supported cell of the full declaration has it: not a question",
}

SCRIPT = """
const axes = JSON.parse(document.getElementById('axes').textContent);
const rows = Array.from(document.querySelectorAll('#cells tbody tr'));
const selects = {};
for (const axis of axes) selects[axis] = document.getElementById('f-' + axis);
const params = new URLSearchParams(window.location.search);
for (const axis of axes) if (params.has(axis)) selects[axis].value = params.get(axis);
function apply() {
  let shown = 0;
  for (const row of rows) {
    const ok = axes.every(a => !selects[a].value || row.dataset[a.replace('_', '')] === selects[a].value);
    row.style.display = ok ? '' : 'none';
    if (ok) shown += 1;
  }
  document.getElementById('shown').textContent = shown + ' of ' + rows.length + ' cells shown';
}
for (const axis of axes) selects[axis].addEventListener('change', apply);
apply();
"""


def word(cell: CellResult, known: Mapping[str, Any] | None = None) -> str:
    """The outcome as the page's filter and colours know it ("known" for any expected failure)."""
    return tables.word(cell, known).split()[0]


_FINDING = re.compile(r"^(.*) \[([a-z0-9-]+)\]$")


def _word(value: str) -> str:
    """A table word; an impact's finding ("drifts [id]") one click away, in FINDINGS.md."""
    match = _FINDING.match(value)
    if not match:
        return html.escape(value)
    text, finding = match.groups()
    return (
        f'<a href="FINDINGS.md#{html.escape(finding)}" title="{html.escape(finding)}">{html.escape(text)}</a>'
    )


def _table(table: tables.Table, caption: str) -> str:
    """A table of words, each cell coloured by its first word (yes, partial, no, ...)."""
    headers, rows = table
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="w-{html.escape(v.split()[0].replace("/", "")) if v else "none"}">{_word(v)}</td>'
            for v in row
        )
        + "</tr>"
        for row in rows
    )
    return f'<table class="grid"><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def repro_command(cell: CellResult) -> str:
    """The one command that reruns this cell outside pytest, torchrun the launcher
    (conformance.repro); for a failing property, the cell of its minimal failing example."""

    axes = cell.axes
    return command(
        str(axes.get("minimal_cell", cell.id)),
        str(axes.get("check", "roundtrip")).removeprefix("property-"),
        int(axes["world_size"]),
        str(axes.get("strategy", "")),
    )


def _not_applicable(ruled: list[CellResult]) -> list[str]:
    """Why the n/a entries are n/a (report.applicable): per feature and reason, how many rows."""
    why: dict[tuple[str, str], int] = {}
    for cell in ruled:
        if cell.axes.get(tables.RULE_NA):
            key = (str(cell.axes[tables.RULE_FEATURE]), cell.detail)
            why[key] = why.get(key, 0) + 1
    if not why:
        return []
    body = [[feature, reason, str(n)] for (feature, reason), n in sorted(why.items())]
    return [
        '<details id="not-applicable"><summary><h2>n/a: why</h2></summary>',
        '<p class="why">The entries no supported cell of the full declaration has, by feature and '
        "reason (the first rule a declared cell of the row meets, or none declared).</p>",
        _table((["feature", "reason", "rows"], body), "feature x reason"),
        "</details>",
    ]


def _grids(
    cells: list[CellResult], known: Mapping[str, Any], findings: list[Finding], ruled: list[CellResult]
) -> str:
    """The feature x strategy table and the square save x load grid (interop), when the run
    has those cells. ruled: the answers of folded unsupported cells (report.rules.ruled_cells),
    for the feature tables only."""
    words = "; ".join(f"{w}: {m}" for w, m in tables.SUPPORT_WORDS.items())
    meaning = "; ".join(f"{f.name}: {f.meaning}" for _, f in tables.features())
    judged = judge_cells(cells, findings)
    features = tables.feature_table(cells + ruled, known, judged)
    summary, folded = tables.summary_table(cells + ruled, known, judged)
    single = tables.one_cause_rows(cells, judged)
    out = []
    if summary[1] or folded:
        out += [
            '<details open id="summary"><summary><h2>What works</h2></summary>',
            '<p class="why">A row per wrapper family and state-dict API (a registered strategy and '
            "its kind), each feature over every storage, sharding and option of it.</p>",
            _table(summary, "wrapper family / strategy, API x feature") if summary[1] else "",
            f'<p class="why">Nothing ran for {len(folded)} rows: {html.escape(", ".join(folded))}.</p>'
            if folded
            else "",
            *(
                f'<p class="why">{html.escape(group)}: all {ran} cells that ran: {html.escape(bad.impact)} '
                f"({html.escape(bad.scope)}), {html.escape(bad.finding)}</p>"
                for group, (ran, bad) in sorted(single.items())
            ),
            "</details>",
        ]
    out += _not_applicable(ruled)
    out += [
        '<details id="features"><summary><h2>Features by strategy</h2></summary>',
        f'<p class="why">{html.escape(words)}.<br>{html.escape(meaning)}.</p>',
        _table(features, "strategy (wrapper, state-dict API, storage) x feature")
        if features[1]
        else f"<p>{html.escape(tables.NO_FEATURE_CELLS)}</p>",
        "</details>",
    ]
    for name, check in CHECKS.items():  # a grid per check; the square ones (interop) open
        grid = [c for c in cells if tables.check_of(c) == name]
        if grid:
            square = isinstance(check.shape, GridCells)
            caption = (
                "rows: saved by; columns: loaded by" if square else "rows: strategy; columns: world size"
            )
            out += [
                f'<details{" open" if square else ""} id="{name}"><summary><h2>{html.escape(check.title)}</h2></summary>',
                _table(tables.check_table(name, grid, known), caption),
                "</details>",
            ]
    return "\n".join(out)


def render_html(
    environment: dict[str, Any],
    cells: list[CellResult],
    known: Mapping[str, Any] | None = None,
    findings: list[Finding] | None = None,
) -> str:
    """`known`: cell id -> baseline.Expectation of the failures a baseline expects."""

    known = known or {}
    esc = html.escape
    values = {axis: sorted({str(c.axes.get(axis, "")) for c in cells} - {""}) for axis in FILTER_AXES[2:]}
    values["check"] = sorted({str(c.axes.get("check", "roundtrip")) for c in cells})
    values["outcome"] = sorted({word(c, known) for c in cells})
    filters = []
    for axis in FILTER_AXES:
        options = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values[axis])
        filters.append(
            f'<label>{axis} <select id="f-{axis}"><option value="">all</option>{options}</select></label>'
        )
    body = []
    for cell in sorted(cells, key=lambda c: c.id):
        shown = word(cell, known)
        data = " ".join(
            f'data-{axis.replace("_", "")}="{esc(str(cell.axes.get(axis, "roundtrip" if axis == "check" else "")))}"'
            for axis in FILTER_AXES
            if axis != "outcome"
        )
        note = ""
        if cell.outcome in FAILING:
            entry = known.get(cell.id)
            if entry is not None:
                link = f' <a href="{esc(entry.link)}">{esc(entry.link)}</a>' if entry.link else ""
                note = f'<div class="why">known {esc(cell.outcome.value)}: {esc(entry.reason)}{link}</div>'
            note += (
                f'<div class="err">{esc(first_line(cell.detail))}</div>'
                f'<code class="repro">{esc(repro_command(cell))}</code>'
            )
        elif cell.outcome in (Outcome.SKIP, Outcome.UNSUPPORTED):
            note = f'<div class="why">{esc(cell.detail[:300])}</div>'
        body.append(
            f'<tr class="o-{shown}" data-outcome="{shown}" {data}><td><code>{esc(cell.id)}</code>{note}</td>'
            f"<td>{esc(shown)}</td></tr>"
        )
    per_check: dict[str, Counter[str]] = {}
    for cell in cells:
        per_check.setdefault(str(cell.axes.get("check", "roundtrip")), Counter())[word(cell, known)] += 1
    summary = []
    for check, counts in sorted(per_check.items()):
        ran = sum(v for k, v in counts.items() if k not in ("skip", "unsupported"))
        passed = counts["pass"] + counts["refused"]
        detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        summary.append(f"<li>{esc(check)}: [{passed}/{ran}] passed of those run ({esc(detail)})</li>")
    css = "".join(
        f".o-{k} td:last-child, .legend .o-{k}, .w-{k} {{ background: {v}; }}" for k, v in COLOURS.items()
    )
    css += "".join(f".w-{k} {{ background: {v}; }}" for k, v in SUPPORT_COLOURS.items())
    legend = "".join(f'<li><span class="o-{k}">{k}</span>: {esc(v)}</li>' for k, v in LEGEND.items())
    extra = _grids(cells, known, findings or [], ruled_cells(environment))
    env = environment
    title = f"Checkpoint conformance: torch {env.get('torch')} on {env.get('backend')} ({env.get('device')})"
    meta = ". ".join(
        [
            *partial_sentences(env),  # a run that is not the whole matrix says so first
            ", ".join(
                f"{k} {env.get(k)}"
                for k in ("matrix", "time_utc", "suite_version", "suite_commit", "python", "platform")
            ),
            *supplement_sentences(env),  # cells added later (publish --add)
        ]
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }} table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; font-size: 13px; }}
.err {{ color: #800; }} .why {{ color: #555; }} .repro {{ color: #333; font-size: 12px; }}
.legend span {{ padding: 0 4px; }} .grid {{ width: auto; margin-bottom: 1em; }}
.grid td, .grid th {{ font-size: 12px; white-space: nowrap; }} summary h2 {{ display: inline; }} label {{ margin-right: 8px; }} {css}
</style></head><body>
<h1>{esc(title)}</h1>
<p>{esc(meta)}</p>
<ul class="legend">{legend}</ul>
<ul>{"".join(summary)}</ul>
{extra}
<h2>Cells</h2>
<div>{"".join(filters)}</div>
<p id="shown"></p>
<table id="cells"><thead><tr><td>cell</td><td>outcome</td></tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table>
<script type="application/json" id="axes">{json.dumps(list(FILTER_AXES))}</script>
<script>{SCRIPT}</script>
</body></html>
"""

"""The history across torch versions as Markdown (HISTORY.md) and as the index page of the
published tables (index.html: every table linked, then the same history)."""

from __future__ import annotations

import html
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from conformance.report.environment import cpu_words
from conformance.report.history import Published, SeriesHistory
from conformance.report.tables import SUPPORT_WORDS, Table
from conformance.report.write import outcome_summary

INTRO = (
    "Per strategy row and feature, the versions where it holds, in the words of the feature "
    "table (" + "; ".join(f"{w}: {m}" for w, m in SUPPORT_WORDS.items()) + "). Only the entries "
    "that differ between versions are listed; then every cell that changed between consecutive "
    "versions, and the versions each finding was seen in (the number of cells it explains)."
)


def _md(table: Table) -> str:
    headers, body = table
    return tabulate(body, headers=headers, tablefmt="github") if body else "(none)"


SUMMARY = (
    "A summary: per series, the tables, how many (strategy row, feature) entries differ between "
    "versions, per pair of consecutive versions how many cells moved from one outcome to another, "
    "and the versions each finding was seen in. Every entry and every cell that changed, with the "
    "first line of why, are on the index page (index.html), which renders what this page would be "
    "too large to."
)


def _moves(changed: Table) -> Table:
    """A step's changed cells counted by (old outcome, new outcome), most first."""
    _, body = changed
    counts = Counter((str(row[1]), str(row[2])) for row in body)
    rows = [[old, new, n] for (old, new), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return ["from", "to", "cells"], rows


def _table_line(t: Published) -> str:
    """A published table in one line: its torch, outcomes and file, and the CPU it ran on where
    it recorded one."""
    line = f"- torch {t.version} ({t.environment.get('torch')}): {outcome_summary(t.cells)}; `{t.path}`"
    words = cpu_words(t.environment)
    return f"{line}; {words}" if words else line


def render_history_markdown(series: Sequence[SeriesHistory]) -> str:
    lines = ["# Across torch versions", "", SUMMARY, ""]
    for s in series:
        versions = ", ".join(t.version for t in s.tables)
        lines += [f"## {s.name}: torch {versions}", ""]
        lines += [_table_line(t) for t in s.tables]
        differ = len(s.features[1])
        lines += [
            "",
            f"{differ} (strategy row, feature) entries differ between versions, {s.stable} are the same.",
            "",
        ]
        for old, new, changed, note in s.steps:
            lines += [f"### {old} -> {new}: {len(changed[1])} cells changed", ""]
            lines += [note, ""] if note else []
            if changed[1]:
                lines += [_md(_moves(changed)), ""]
        lines += ["### Findings by version", "", _md(s.findings), ""]
    return "\n".join(lines)


def _html_table(table: Table) -> str:
    headers, body = table
    if not body:
        return "<p>(none)</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _link(target: Path, base: Path, text: str) -> str:
    if not target.exists():
        return ""
    return f'<a href="{html.escape(os.path.relpath(target, base))}">{html.escape(text)}</a>'


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:90em}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;"
    "font-size:90%;text-align:left}th{background:#eee}"
)


def render_index_html(tables: Sequence[Published], series: Sequence[SeriesHistory], index: Path) -> str:
    """Every published table linked (its matrix page, Markdown, findings, results), newest
    version first within each series; then the history of each series."""
    base = index.parent
    rows = []
    for s in series:
        for t in reversed(s.tables):
            where = t.path.parent
            links = " ".join(
                filter(
                    None,
                    [
                        _link(where / "matrix.html", base, "matrix"),
                        _link(where / "matrix.md", base, "markdown"),
                        _link(where / "FINDINGS.md", base, "findings"),
                        _link(t.path, base, t.path.name),
                    ],
                )
            )
            rows.append(
                f"<tr><td>{html.escape(t.version)}</td><td>{html.escape(s.name)}</td>"
                f"<td>{html.escape(str(t.environment.get('time_utc', '')))}</td>"
                f"<td>{html.escape(outcome_summary(t.cells))}</td><td>{links}</td></tr>"
            )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Checkpoint conformance: published tables</title><style>{STYLE}</style></head><body>",
        "<h1>Checkpoint conformance: published tables</h1>",
        "<table><thead><tr><th>torch</th><th>series</th><th>run at</th><th>cells</th><th>tables</th></tr>"
        f"</thead><tbody>{''.join(rows)}</tbody></table>",
        f"<h1 id='history'>Across torch versions</h1><p>{html.escape(INTRO)}</p>",
    ]
    for s in series:
        parts += [
            f"<h2>{html.escape(s.name)}: torch {html.escape(', '.join(t.version for t in s.tables))}</h2>",
            f"<h3>Features that differ ({s.stable} entries are the same in every version)</h3>",
            _html_table(s.features),
        ]
        for old, new, changed, note in s.steps:
            parts += [
                f"<h3>{html.escape(old)} -&gt; {html.escape(new)}: {len(changed[1])} cells changed</h3>"
            ]
            parts += [f'<p class="why">{html.escape(note)}</p>'] if note else []
            parts += [_html_table(changed)]
        parts += ["<h3>Findings by version</h3>", _html_table(s.findings)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"

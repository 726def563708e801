"""The sections of matrix.md that sum up the non-passes: the pipe tables every section uses (a
word's finding one click away), the findings with their counts and the cells no finding
explains, the checks' counts, and the failures a baseline expects."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from conformance.check.registry import CHECKS
from conformance.findings import Finding, attribute
from conformance.observed import EVENT_KINDS
from conformance.outcome import FAILING, CellResult, Outcome, first_line
from conformance.report.impact import SEVERE, Judged, short_scope
from conformance.report.tables import Table

SHOWN = 3  # cell ids shown per finding; the rest are in FINDINGS.md and results.json


def table_word(word: str) -> str:
    """A table word as Markdown: an impact's finding ("drifts [id]") one click away (a reference
    link, its target defined once at the end of the page: link_targets), silent data loss in
    bold, a failing outcome in capitals."""
    match = _FINDING.search(word)
    if match:
        text = word[: match.start()].rstrip()
        shown = f"**{text}**" if any(text.startswith(s) or f", {s}" in text for s in SEVERE) else text
        return f"[{shown}][{match.group(1)}]"
    if word in BOLD or any(word.startswith(s) or f", {s}" in word for s in SEVERE):
        return f"**{word.upper() if word in BOLD else word}**"
    return word


_FINDING = re.compile(r"\[([a-z0-9-]+)\]$")
_REFERENCE = re.compile(r"\]\[([a-z0-9-]+)\]")
BOLD = {o.value for o in FAILING} | {"no"}


def pipe_table(table: Table, tight: bool = False) -> str:
    """A pipe table without padding (GitHub and every code host render it; padding made the
    tables megabytes). tight: not even a space beside each pipe (the per-strategy table: 850 rows
    of 44 columns, 75 KB of spaces)."""
    headers, rows = table
    pad = "" if tight else " "

    def line(words: list[str]) -> str:
        return f"|{pad}" + f"{pad}|{pad}".join(words) + f"{pad}|"

    out = [line(list(headers)), "|" + "---|" * len(headers)]
    out += [line([table_word(v) for v in row]) for row in rows]
    return "\n".join(out)


def link_targets(text: str) -> list[str]:
    """The target of each finding a page's words link to (table_word's reference links), once
    each: a feature table of 800 rows names a few dozen findings 2000 times."""
    linked = sorted(set(_REFERENCE.findall(text)))
    return [f"[{fid}]: FINDINGS.md#{fid}" for fid in linked]


def findings_section(
    cells: list[CellResult], findings: list[Finding], judged: Mapping[str, Judged]
) -> list[str]:
    """The findings with how many cells of this run each explains, then the non-passes grouped
    by the findings that explain them, and every difference no finding explains."""
    failing = sorted((c for c in cells if c.id in judged), key=lambda c: c.id)
    if not failing:
        return []
    by_finding: dict[str, list[str]] = defaultdict(list)
    for c in failing:
        for fid in judged[c.id].findings:
            by_finding[fid].append(c.id)
    rows = [
        [f.title + f" [{f.id}]", f.kind, f.impact, short_scope(f.scope), str(len(by_finding[f.id]))]
        for f in findings
        if by_finding.get(f.id)
    ]
    lines = [
        "## Findings and the non-passes they explain",
        "",
        "Each finding ([FINDINGS.md](FINDINGS.md): what it is, upstream, a reproduction without this "
        "suite), how bad it is at worst, where it holds, and how many cells of this run it explains "
        "(a cell with differences of two causes counts for both).",
        "",
        pipe_table((["finding", "class", "impact", "scope", "cells"], rows)),
        "",
    ]
    for f in findings:
        ids = by_finding.get(f.id)
        if ids:
            shown = ", ".join(f"`{i}`" for i in ids[:SHOWN])
            more = f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
            lines.append(f"- `{f.id}` ({len(ids)}): {shown}{more}")
    lines.append("")
    attributions = {c.id: attribute(c, findings) for c in failing}
    open_cells = [c for c in failing if not attributions[c.id].explained]
    lines += ["## Differences no finding explains", ""]
    if not open_cells:
        lines += ["None: every difference and error of this run is explained by a finding.", ""]
        return lines
    lines += [f"{len(open_cells)} cells: each needs a finding, or a fix.", ""]
    for c in open_cells:
        records = attributions[c.id].unexplained or c.records
        event = not records or records[0].kind in EVENT_KINDS
        first = first_line(c.detail) if event else records[0].line.splitlines()[0][:240]
        more = f" (and {len(records) - 1} more)" if len(records) > 1 else ""
        lines.append(f"- `{c.id}`: {c.outcome.value}: {first}{more}")
    return [*lines, ""]


def checks_section(cells: list[CellResult]) -> list[str]:
    """A line per check: its title and how its cells ended (the grids are in matrix.html)."""
    by_check: dict[str, Counter[str]] = defaultdict(Counter)
    for cell in cells:
        by_check[str(cell.axes.get("check", "roundtrip"))][cell.outcome.value] += 1
    titles = {name: check.title for name, check in CHECKS.items()}
    order = [c for c in titles if c in by_check] + sorted(set(by_check) - set(titles))
    words = [o.value for o in Outcome]
    rows = [
        [titles.get(c, c), str(sum(by_check[c].values())), *(str(by_check[c][w]) for w in words)]
        for c in order
    ]
    return ["## Checks", "", pipe_table((["check", "cells", *words], rows)), ""]


def known_section(cells: list[CellResult], known: Mapping[str, Any]) -> list[str]:
    """The failures the baseline expects, by their outcome and reason."""
    groups: dict[str, list[str]] = defaultdict(list)
    for c in cells:
        entry = known.get(c.id)
        if entry is not None:
            link = f", {entry.link}" if entry.link else ""
            groups[f"known {c.outcome.value} ({entry.reason}{link})"].append(c.id)
    if not groups:
        return []
    lines = ["## Failures the baseline expects", ""]
    for reason, ids in sorted(groups.items()):
        more = f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
        lines.append(f"- {reason}: {len(ids)} cells, e.g. {', '.join(f'`{i}`' for i in ids[:SHOWN])}{more}")
    return [*lines, ""]

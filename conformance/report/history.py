"""The tables of several torch versions side by side, in the style of caniuse: per strategy row
and feature, the versions where it holds ("yes since 2.12", "yes until 2.11", "no in 2.12
only"); every cell that changed between consecutive versions with its first detail line; and
the versions each finding was seen in. `python -m conformance history reports/*/results.json`.

Tables are compared within a series: the same hardware, backend and matrix profile."""

from __future__ import annotations

import fnmatch
import itertools
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.findings import Finding
from conformance.outcome import FAILING, CellResult, first_line
from conformance.report.diff import diff_runs
from conformance.report.rules import rule_counts, ruled_cells
from conformance.report.tables import Table, feature_table


@dataclass(frozen=True)
class Published:
    """One published table: where its results.json is, what it ran on, its cells."""

    path: Path
    environment: dict[str, Any]
    cells: list[CellResult] = field(repr=False)

    @property
    def version(self) -> str:
        return str(self.environment.get("torch", "?")).split("+")[0]

    @property
    def series(self) -> str:
        """What is compared across versions: the directory's name without its torch version
        (publish names it torch-<version>-<hardware>-<backend>[-<matrix>]), else the run's."""
        match = re.fullmatch(r"torch-[0-9][^-]*-(.+)", self.path.parent.name)
        if match:
            return match.group(1)
        env = self.environment
        series = env.get("series") or {}
        hardware = series.get("hardware", env.get("device", "?"))
        backend = series.get("backend", env.get("backend", "?"))
        return f"{hardware} {backend}, matrix {env.get('matrix', '?')}"


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def series_of(tables: Sequence[Published]) -> dict[str, list[Published]]:
    """Tables by series, each series in version order (one table per version: the last given)."""
    out: dict[str, dict[str, Published]] = defaultdict(dict)
    for table in tables:
        out[table.series][table.version] = table
    return {
        name: sorted(by.values(), key=lambda t: version_key(t.version)) for name, by in sorted(out.items())
    }


def phrase(versions: Sequence[str], words: Sequence[str]) -> str:
    """How one entry went across the versions, in words."""
    if len(set(words)) == 1:
        return f"{words[0]} in every version"
    changes = [i for i in range(1, len(words)) if words[i] != words[i - 1]]
    if len(changes) == 1:
        k = changes[0]
        before, after = words[0], words[-1]
        if after == "yes":
            return f"yes since {versions[k]} ({before} before)"
        if before == "yes":
            return f"yes until {versions[k - 1]} ({after} since {versions[k]})"
        return f"{before} until {versions[k - 1]}, {after} since {versions[k]}"
    odd = [i for i, w in enumerate(words) if words.count(w) == 1]
    others = {w for w in words if words.count(w) > 1}
    if len(odd) == 1 and len(others) == 1:
        i = odd[0]
        return f"{words[i]} in {versions[i]} only ({others.pop()} in the others)"
    return ", ".join(f"{v}: {w}" for v, w in zip(versions, words))


def feature_history(tables: Sequence[Published]) -> tuple[Table, int]:
    """The (strategy, feature) entries that differ across the series' versions, with the phrase
    and each version's word; and how many entries are the same in every version."""
    versions = [t.version for t in tables]
    words: dict[tuple[str, str], list[str]] = defaultdict(lambda: ["unknown"] * len(tables))
    for i, table in enumerate(tables):
        headers, body = feature_table(table.cells + ruled_cells(table.environment), {})
        for row in body:
            for feature, word in zip(headers[1:], row[1:]):
                words[(row[0], feature)][i] = word
    changed = {key: w for key, w in words.items() if len(set(w)) > 1}
    body = [[s, f, phrase(versions, w), *w] for (s, f), w in sorted(changed.items())]
    return (["strategy", "feature", "across versions", *versions], body), len(words) - len(changed)


def changed_cells(old: Published, new: Published) -> Table:
    """Every cell whose outcome differs between two versions (added and removed ones too), with
    the first line of the detail that says why (the new one's; the old one's where it passes now)."""
    d = diff_runs(old.cells, new.cells)
    body: list[list[str]] = []
    if step_note(old, new):  # another selection of cells: only the shared ones compare
        d.added, d.removed = [], []
    for before, after in [*d.regressed, *d.improved, *d.changed]:
        why = after.detail if after.outcome in FAILING else before.detail
        body.append([after.id, before.outcome.value, after.outcome.value, first_line(why)])
    body += [[c.id, "(no cell)", c.outcome.value, first_line(c.detail)] for c in d.added]
    body += [[c.id, c.outcome.value, "(no cell)", ""] for c in d.removed]
    return ["cell", old.version, new.version, "why (first line of the detail)"], body


def step_note(old: Published, new: Published) -> str:
    """What a step between two tables of different profiles compares (empty: the same profile)."""
    if _profile(old) == _profile(new):
        return ""
    return (
        f"The profiles differ ({_profile(old)} -> {_profile(new)}): only the cells both tables ran "
        "are compared; a cell only one of them has is no change."
    )


def rule_note(old: Published, new: Published) -> str:
    """How the cells unsupported by design moved between two tables (they are rules, not rows:
    a cell that moves between supported and unsupported shows here and in `conformance diff`)."""
    before = rule_counts(old.environment, old.cells)
    after = rule_counts(new.environment, new.cells)
    changed = [k for k in before.keys() | after.keys() if before[k] != after[k]]
    if not changed:
        return ""
    return (
        f"Unsupported by design: {sum(before.values())} -> {sum(after.values())} cells; {len(changed)} "
        f"rules changed their count (`python -m conformance diff {old.path} {new.path}` lists them)."
    )


def _profile(table: Published) -> str:
    """What selected a table's cells: its profile, and how (a covering, or the product)."""
    profile = table.environment.get("profile") or {}
    how = "a covering" if profile.get("covering") else "the product"
    return f"{table.environment.get('matrix', '?')} ({how})"


def explained_counts(tables: Sequence[Published], findings: Sequence[Finding]) -> dict[str, list[int]]:
    """finding id -> how many cells of each table it explains, in the tables' order."""
    counts: dict[str, list[int]] = {f.id: [0] * len(tables) for f in findings}
    for i, table in enumerate(tables):
        for cell in table.cells:
            if cell.outcome in FAILING:
                for finding in findings:
                    if finding.about(cell):
                        counts[finding.id][i] += 1
    return counts


def finding_versions(tables: Sequence[Published], findings: Sequence[Finding]) -> Table:
    """Each finding against each version: how many of the version's cells it explains."""
    versions = [t.version for t in tables]
    counts = explained_counts(tables, findings)
    body = [
        [
            fid,
            *(str(n) if n else "-" for n in row),
            ", ".join(v for v, n in zip(versions, row) if n) or "none",
        ]
        for fid, row in counts.items()
    ]
    return ["finding", *versions, "seen in"], body


@dataclass(frozen=True)
class SeriesHistory:
    name: str
    tables: list[Published]
    features: Table
    stable: int
    steps: list[tuple[str, str, Table, str]]  # (old version, new version, changed cells, note)
    findings: Table


def histories(tables: Sequence[Published], findings: Sequence[Finding]) -> list[SeriesHistory]:
    out = []
    for name, series in series_of(tables).items():
        features, stable = feature_history(series)
        steps = [
            (
                a.version,
                b.version,
                changed_cells(a, b),
                " ".join(filter(None, (step_note(a, b), rule_note(a, b)))),
            )
            for a, b in itertools.pairwise(series)
        ]
        out.append(SeriesHistory(name, series, features, stable, steps, finding_versions(series, findings)))
    return out


def seen_in(tables: Sequence[Published], findings: Sequence[Finding]) -> dict[str, set[str]]:
    """finding id -> the versions of `tables` in which it explains a cell (any series)."""
    counts = explained_counts(tables, findings)
    return {fid: {t.version for t, n in zip(tables, row) if n} for fid, row in counts.items()}


def covers(table: Published, finding: Finding) -> bool:
    """Whether the table has a cell of the finding's patterns at all (whatever its outcome):
    only such a table can say the finding was not seen in its version."""
    return any(fnmatch.fnmatch(c.id, p) for c in table.cells for p in finding.cells)


def update_finding_versions(text: str, tables: Sequence[Published], findings: Sequence[Finding]) -> str:
    """findings.toml with each finding's `torch = [...]` set from the published tables: for a
    version with a table that has the finding's cells, seen there or not; other versions (a
    repro's run, cells published elsewhere such as the cross-version grid) kept."""
    seen = seen_in(tables, findings)
    by_id = {f.id: f for f in findings}
    judged = {f.id: {t.version for t in tables if covers(t, f)} for f in findings}
    out, current = [], None
    for line in text.splitlines(keepends=True):
        match = re.match(r'id = "([^"]+)"', line)
        if match:
            current = match.group(1)
        if current in by_id and re.match(r"torch = \[", line):
            kept = {v for v in by_id[current].torch if v not in judged[current]}
            versions = sorted(kept | seen[current], key=version_key)
            line = "torch = [" + ", ".join(f'"{v}"' for v in versions) + "]\n"
        out.append(line)
    return "".join(out)

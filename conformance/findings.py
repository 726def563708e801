"""Findings: what the non-passes of a run are, as data (reports/findings.toml).

A finding names its class (a bug of the code under test, a documented limitation, a
deprecated API, a pitfall a cell shows on purpose), the cells it explains (id patterns, and a
pattern their detail must match), the torch versions it was seen on, its upstream record, and
for a bug a standalone reproduction: a script using torch (and the framework) only, never this
suite, that exits 1 while the bug is present. The reports render the findings beside the
results; the CI baseline takes its reasons and links from them.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conformance.outcome import FAILING, CellResult, Outcome

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FINDINGS_PATH = Path(__file__).resolve().parent.parent / "reports" / "findings.toml"

# class -> what it means, in the order the reports list them
CLASSES: dict[str, str] = {
    "bug": "a behaviour of the code under test that contradicts its documentation or the user's "
    "reasonable expectation; a standalone script reproduces it",
    "documented limitation": "the code under test refuses or does not support this, as its "
    "documentation or its maintainers say",
    "deprecated API": "the cell calls an API that warns it is deprecated",
    "pitfall": "a cell that shows on purpose what happens when an API is used against its documentation",
    "not promised": "a behaviour no documentation promises either way (an older torch reading a newer "
    "torch's files): reported as what happens, never as a bug",
}


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    kind: str  # a key of CLASSES
    summary: str
    cells: tuple[str, ...]  # fnmatch patterns on cell ids
    detail: str = ""  # a regular expression the cell's detail must contain (re.search)
    outcomes: tuple[str, ...] = tuple(o.value for o in sorted(FAILING - {Outcome.HARNESS_ERROR}))
    torch: tuple[str, ...] = ()  # versions it was seen on
    upstream: tuple[str, ...] = ()  # issue and pull-request links
    upstream_status: str = ""  # e.g. "open", "fixed after 2.13.0", "not found (likely new)"
    repro: str = ""  # a script's path relative to the repository root (bugs)
    frameworks: tuple[str, ...] = ()  # what the repro needs besides torch
    # a bug across versions: its script runs `save DIR` under the first torch, `load DIR` under
    # the second (each version's venv: python -m conformance publish --torch V --install-only)
    repro_pair: tuple[str, ...] = ()
    _pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def explains(self, cell: CellResult) -> bool:
        """Whether this finding is what the cell shows (a harness-error never is)."""
        if cell.outcome is Outcome.HARNESS_ERROR or cell.outcome.value not in self.outcomes:
            return False
        if not any(fnmatch.fnmatchcase(cell.id, pattern) for pattern in self.cells):
            return False
        return self._pattern is None or self._pattern.search(cell.detail) is not None

    @property
    def link(self) -> str:
        return self.upstream[0] if self.upstream else ""


def _finding(entry: dict[str, object], where: str) -> Finding:
    known = {f for f in Finding.__dataclass_fields__ if not f.startswith("_")}
    unknown = set(entry) - known
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    missing = {"id", "title", "kind", "summary", "cells"} - set(entry)
    if missing:
        raise ValueError(f"{where}: missing {sorted(missing)}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}
    finding = Finding(**values)  # type: ignore[arg-type]
    if finding.kind not in CLASSES:
        raise ValueError(f"{where} ({finding.id}): class {finding.kind!r} is not one of {list(CLASSES)}")
    if finding.kind == "bug" and not finding.repro:
        raise ValueError(f"{where} ({finding.id}): a bug needs a standalone reproduction (repro = ...)")
    bad = set(finding.outcomes) - {o.value for o in Outcome}
    if bad:
        raise ValueError(f"{where} ({finding.id}): unknown outcomes {sorted(bad)}")
    pattern = re.compile(finding.detail) if finding.detail else None
    object.__setattr__(finding, "_pattern", pattern)
    return finding


def load_findings(path: Path = FINDINGS_PATH) -> list[Finding]:
    """The findings of a findings.toml ([[finding]] tables); [] when there is no such file."""
    if not Path(path).exists():
        return []
    data = tomllib.loads(Path(path).read_text())
    findings = [_finding(e, f"{path} finding #{i + 1}") for i, e in enumerate(data.get("finding", []))]
    ids = [f.id for f in findings]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: finding ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return findings


def explaining(cell: CellResult, findings: list[Finding]) -> list[Finding]:
    """The findings that explain this cell, in the data's order."""
    return [f for f in findings if f.explains(cell)]

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
import functools
import importlib.resources
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conformance.observed import EVENT_KINDS, IMPACTS, KINDS, SILENT_IMPACTS, Observed, worst
from conformance.outcome import FAILING, CellResult, Outcome

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FINDINGS_PATH = Path(__file__).resolve().parent.parent / "reports" / "findings.toml"  # the checkout's
# An installed wheel ships that file as package data, conformance/data/findings.toml (pyproject.toml
# maps the package conformance.data to reports/): the checkout's file stays the one source.
PACKAGED_FINDINGS = ("conformance.data", "findings.toml")

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


# Classes whose findings mark the cells they cover (the row calls a deprecated API) and explain
# none of their differences.
MARKING_CLASSES = frozenset({"deprecated API"})


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    kind: str  # a key of CLASSES
    summary: str
    cells: tuple[str, ...]  # fnmatch patterns on cell ids
    # fnmatch patterns of cells among those that it is not about: a library's own code with the
    # same symptom is that library's finding (torchtitan's optimizer flattening, not torch's DSD)
    not_cells: tuple[str, ...] = ()
    # patterns of more cells it explains wherever they occur (another library's row that reaches
    # the same API): matched by what the cell does (`detail`), never read by the coverings'
    # preference for the cells a finding names (conformance.matrix.cells.feature_presets)
    also_cells: tuple[str, ...] = ()
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
    # a bug of older torch only, fixed in the suite's own: its script runs under this version's
    # venv (python -m conformance publish --torch V --install-only), where it exits 1
    repro_torch: str = ""
    # Which of a cell's records (conformance.observed) it explains: a regular expression on the
    # key path (re.search) and the kinds it explains; with either, `detail` is a condition on
    # the cell's whole detail, without, it selects the records whose line it matches (see
    # explains_record).
    key: str = ""
    kinds: tuple[str, ...] = ()
    # how bad it is (a key of conformance.observed.IMPACTS): with kinds or key, the impact of the
    # records it explains; without, at worst (never milder than what those records show by their
    # kind: tests/test_findings.py); and where it holds ("all devices", "CPU only", ...)
    impact: str = ""
    scope: str = "all devices"
    # the errors it explains are the late sign of silent harm of this impact (one of
    # SILENT_IMPACTS): a load dropped a param group's lr without a word, and the next optimizer
    # step raised KeyError. Without it an error it explains refuses, a crash crashes.
    errors_follow: str = ""
    # a cell that shows it, or several (a list: one per world size or profile): covering profiles
    # (conformance.matrix.covering) always run each one the product they choose from has, so
    # that no finding goes unseen
    witness: str | tuple[str, ...] = ""
    _pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    _key: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def covers(self, cell: CellResult) -> bool:
        """Whether the cell is one this finding is about (its id and outcome; a harness-error
        never is)."""
        if cell.outcome is Outcome.HARNESS_ERROR or cell.outcome.value not in self.outcomes:
            return False
        return self._matches(cell.id, (*self.cells, *self.also_cells))

    def names(self, cell_id: str) -> bool:
        """Whether a cell of this id is one its patterns name (whatever its outcome)."""
        return self._matches(cell_id, self.cells)

    def _matches(self, cell_id: str, patterns: tuple[str, ...]) -> bool:
        if any(fnmatch.fnmatchcase(cell_id, pattern) for pattern in self.not_cells):
            return False
        return any(fnmatch.fnmatchcase(cell_id, pattern) for pattern in patterns)

    @property
    def selects(self) -> bool:
        """It selects the records it explains by kind or key (and states their impact)."""
        return bool(self.kinds) or self._key is not None

    @property
    def marks(self) -> bool:
        """It marks the cells it covers and explains nothing (MARKING_CLASSES)."""
        return self.kind in MARKING_CLASSES

    def explains_record(self, cell: CellResult, record: Observed) -> bool:
        """Whether this finding explains one record of the cell."""
        if self.marks or not self.covers(cell):
            return False
        if self.kinds and record.kind not in self.kinds:
            return False
        if self._key is not None and self._key.search(record.key) is None:
            return False
        if self._pattern is None:
            return True
        # With kinds or a key to select records, `detail` is a condition on the cell's whole
        # detail; without, it selects the records whose line it matches (an error's, crash's or
        # hang's: the whole detail, its traceback).
        whole = self.kinds or self._key is not None or record.kind in EVENT_KINDS or record.scope == "cell"
        return self._pattern.search(cell.detail if whole else record.line) is not None

    def explains(self, cell: CellResult) -> bool:
        """Whether this finding explains some record of the cell."""
        return self.covers(cell) and any(self.explains_record(cell, r) for r in cell.records)

    def about(self, cell: CellResult) -> bool:
        """Whether the cell shows this finding: one it marks, or one it explains a record of."""
        return self.covers(cell) if self.marks else self.explains(cell)

    @property
    def witnesses(self) -> tuple[str, ...]:
        """The ids of the cells that show it (`witness`, one or a list)."""
        return (self.witness,) if isinstance(self.witness, str) and self.witness else tuple(self.witness)

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
    explains_failures = set(finding.outcomes) & {o.value for o in FAILING} and not finding.marks
    if finding.impact not in IMPACTS if explains_failures else finding.impact not in ("", *IMPACTS):
        raise ValueError(
            f"{where} ({finding.id}): impact {finding.impact!r} is not one of {list(IMPACTS)} (worst first)"
        )
    if finding.errors_follow not in ("", *SILENT_IMPACTS):
        raise ValueError(
            f"{where} ({finding.id}): errors_follow {finding.errors_follow!r} is not one of {list(SILENT_IMPACTS)}"
        )
    bad = set(finding.kinds) - set(KINDS)
    if bad:
        raise ValueError(f"{where} ({finding.id}): unknown kinds {sorted(bad)}; kinds are {list(KINDS)}")
    object.__setattr__(finding, "_pattern", re.compile(finding.detail) if finding.detail else None)
    object.__setattr__(finding, "_key", re.compile(finding.key) if finding.key else None)
    return finding


def findings_path() -> Path:
    """The findings data of this installation: the copy the installed package ships, read through
    importlib.resources, else the checkout's reports/findings.toml."""
    package, name = PACKAGED_FINDINGS
    try:
        packaged = importlib.resources.files(package) / name
    except (ModuleNotFoundError, TypeError):  # no such package, or not one resources can read
        return FINDINGS_PATH
    return packaged if isinstance(packaged, Path) and packaged.is_file() else FINDINGS_PATH


def load_findings(path: Path | None = None) -> list[Finding]:
    """The findings of a findings.toml ([[finding]] tables), by default this installation's
    (findings_path); [] when there is no such file."""
    path = Path(findings_path() if path is None else path)
    if not path.exists():
        return []
    return list(_parsed(str(path), path.read_text()))


@functools.lru_cache(maxsize=16)
def _parsed(path: str, text: str) -> tuple[Finding, ...]:
    """A findings file parsed once per text of it: collecting a covering profile reads it for
    every check and strategy (132 times in `pytest cases --matrix ci`, 2 s of each pytest start)."""
    data = tomllib.loads(text)
    findings = [_finding(e, f"{path} finding #{i + 1}") for i, e in enumerate(data.get("finding", []))]
    ids = [f.id for f in findings]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: finding ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return tuple(findings)


def explaining(cell: CellResult, findings: list[Finding]) -> list[Finding]:
    """The findings that explain some record of this cell, in the data's order."""
    return [f for f in findings if f.explains(cell)]


@dataclass(frozen=True)
class Attribution:
    """A cell's records, each with the findings that explain it."""

    cell: CellResult
    records: tuple[tuple[Observed, tuple[Finding, ...]], ...]

    @property
    def findings(self) -> list[Finding]:
        """Every finding that explains some record, each once, in the data's order."""
        out: dict[str, Finding] = {}
        for _, found in self.records:
            out.update((f.id, f) for f in found)
        return list(out.values())

    @property
    def unexplained(self) -> list[Observed]:
        return [record for record, found in self.records if not found]

    @property
    def explained(self) -> bool:
        """Every record is explained (a failing cell with no record never is)."""
        return bool(self.records) and not self.unexplained

    @property
    def impact(self) -> str | None:
        """The worst impact over the records (record_impact)."""
        return worst(record_impact(record, found) for record, found in self.records)

    @property
    def scope(self) -> str:
        """Where the cell's "no" holds: the findings' scopes, "" while a record is unexplained."""
        if not self.explained:
            return ""
        return "; ".join(sorted({f.scope for f in self.findings}))


def record_impact(record: Observed, found: tuple[Finding, ...] | list[Finding]) -> str:
    """A record's impact. An error, crash or hang is what it is (refuses, crashes, hangs),
    unless a finding explaining an error says it is the late sign of silent harm
    (errors_follow: the optimizer step that raises KeyError because a load dropped the param
    group's lr without a word is lost state). A finding that selects its records by kind or key
    states the impact of the differences it explains (it has looked at them: a scheduler left
    as built differs in values, and is lost state, not corrupted). Otherwise the record's kind
    decides (IMPACT_OF_KIND); a check's own verdict (sanity, hygiene, accepted damage) has none:
    the worst its findings declare, and the worst of all while none explains it."""
    if record.kind in EVENT_KINDS:
        late = [f.errors_follow for f in found if f.errors_follow] if record.kind == "error" else []
        return worst(late) or record.impact or "refuses"
    precise = [f.impact for f in found if f.selects]
    return worst(precise) or record.impact or worst(f.impact for f in found) or "corrupts"


def attribute(cell: CellResult, findings: list[Finding]) -> Attribution:
    """Every record of the cell matched to the findings that explain it."""
    relevant = [f for f in findings if f.covers(cell)]
    pairs = [(r, tuple(f for f in relevant if f.explains_record(cell, r))) for r in cell.records]
    # A resumed run whose losses diverged: every value of its state after that point differs
    # as a consequence, so a value difference with no finding of its own takes the findings
    # of the divergence (the first loss that differs). Other kinds (a missing key, a dtype)
    # are never consequences of values.
    diverged = next((found for r, found in pairs if r.kind == "loss" and found), ())
    if diverged:
        pairs = [(r, found or (diverged if r.kind in DOWNSTREAM_OF_LOSS else ())) for r, found in pairs]
    return Attribution(cell, tuple(pairs))


# the record kinds a diverged trajectory explains (attribute)
DOWNSTREAM_OF_LOSS = ("values", "value")

"""The baseline: known outcomes per cell id, in TOML, so a run fails on regressions only.

    profile = "ci"                       # the --matrix it was written for (optional)
    passes = ["ddp-sd_full-torch_save-adamw-mlp-w2", ...]   # cells expected to pass

    ["fsdp2-dsd_full-dcp-adamw-mlp-w2"]
    outcome = "fail"
    findings = ["dsd-full-betas-list"]   # the findings that explain its differences
    unexplained = ["full state | type | param_groups/0/betas"]   # differences no finding explains
    reason = "get/set_state_dict returns AdamW betas as a list"
    link = "https://github.com/pytorch/pytorch/issues/..."   # optional
    torch = ">=2.6,<2.14"                # optional: the entry holds for these torch versions
    backend = "gloo"                     # optional: and this backend

With `--baseline FILE` a run is a gate (see `judge`): it fails on an expected pass that is now
anything else, on a failure of another kind than expected, on a new failure with no entry,
and on a cell that disappeared (an entry of the baseline's own profile that the matrix no
longer has). Inside a known failure it judges every difference and error the cell recorded
(conformance.observed): each must be explained by one of the entry's findings
(reports/findings.toml) or be one of its `unexplained` signatures; a difference that is neither,
or a finding the entry does not list, fails the gate and is named (key, kind, rank, first
index). How many elements differ does not matter. An entry without `findings` (the older form)
expects the outcome only, with a warning to rewrite it. A known failure that now passes is
stale (a warning); an entry matching no cell of another profile is warned about.
`--update-baseline` writes the file from a run.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.findings import Finding, attribute, load_findings
from conformance.outcome import FAILING, NEVER_EXPECTED, CellResult, Outcome, first_line

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3])


def version_matches(version: str, spec: str) -> bool:
    """`spec` is comma-separated comparisons: ">=2.6,<2.14", "==2.13"."""
    ops = {
        ">=": lambda a, b: a >= b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        "<": lambda a, b: a < b,
        "==": lambda a, b: a[: len(b)] == b,
    }
    have = _version(version)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        match = re.fullmatch(r"(>=|<=|==|>|<)\s*([\d.]+)", part)
        if not match:
            raise ValueError(f"torch condition {spec!r}: {part!r} is not like '>=2.6'")
        if not ops[match.group(1)](have, _version(match.group(2))):
            return False
    return True


@dataclass(frozen=True)
class Expectation:
    outcome: Outcome
    reason: str = ""
    link: str = ""
    torch: str = ""  # a version range, see version_matches
    backend: str = ""
    # the findings that explain the failure's records, and the signatures of those none
    # explains (Observed.signature); None: an entry of the older form, outcome only
    findings: tuple[str, ...] | None = None
    unexplained: tuple[str, ...] = ()

    def applies(self, torch_version: str, backend: str) -> bool:
        if self.backend and self.backend != backend:
            return False
        return not self.torch or version_matches(torch_version, self.torch)


@dataclass(frozen=True)
class Baseline:
    entries: dict[str, Expectation]
    profile: str | None = None
    sha256: str = ""
    path: str = ""
    findings: tuple[Finding, ...] = ()  # what the gate attributes records with
    outcome_only: tuple[str, ...] = ()  # entries of the older form (no findings = [...])

    def expected(self, cell_id: str, torch_version: str, backend: str) -> Expectation | None:
        entry = self.entries.get(cell_id)
        return entry if entry is not None and entry.applies(torch_version, backend) else None

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.entries)

    def __getitem__(self, cell_id: str) -> Expectation:
        return self.entries[cell_id]


@dataclass(frozen=True)
class Verdict:
    """How a cell's outcome stands against its expectation."""

    kind: str  # ok | known | stale | regression | new_failure | new_difference | harness_error
    message: str = ""

    @property
    def fails_the_gate(self) -> bool:
        return self.kind in ("regression", "new_failure", "new_difference", "harness_error")


def surprises(result: CellResult, expected: Expectation, findings: Sequence[Finding]) -> list[str]:
    """What a known failure shows beyond its entry: each record no expected finding explains
    and whose signature the entry does not list, and each finding the entry does not name."""
    attribution = attribute(result, list(findings))
    allowed = set(expected.findings or ())
    out = []
    for record, found in attribution.records:
        if any(f.id in allowed for f in found) or record.signature in expected.unexplained:
            continue
        others = [f.id for f in found]
        why = f" (explained by {', '.join(others)}, which the entry does not expect)" if others else ""
        out.append(f"new difference: {record.describe()}{why}")
    return out


def judge(result: CellResult, expected: Expectation | None, findings: Sequence[Finding] = ()) -> Verdict:
    """How the cell stands against its expectation; `findings` attribute a known failure's
    records (an entry of the newer form)."""
    got = result.outcome
    if got in NEVER_EXPECTED:
        return Verdict("harness_error", f"{got.value}: a fault of this suite, whatever the baseline says")
    if expected is None:
        if got in FAILING:
            return Verdict("new_failure", f"new {got.value}, no baseline entry")
        return Verdict("ok")
    if got == expected.outcome:
        if got not in FAILING:
            return Verdict("ok")
        new = surprises(result, expected, findings) if expected.findings is not None else []
        if new:
            shown = new[:5] + ([f"... and {len(new) - 5} more"] if len(new) > 5 else [])
            return Verdict(
                "new_difference",
                f"known {got.value} ({expected.reason}) with {len(new)} new: " + "; ".join(shown),
            )
        return Verdict("known", f"known {got.value}: {expected.reason} {expected.link}".strip())
    if got is Outcome.PASS:
        return Verdict(
            "stale", f"stale baseline entry: {result.id} was expected to {expected.outcome.value}, now passes"
        )
    return Verdict("regression", f"regression: expected {expected.outcome.value}, got {got.value}")


def load_baseline(path: Path, findings: Sequence[Finding] | None = None) -> Baseline:
    """The baseline file; `findings` (default reports/findings.toml) attribute its entries."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"baseline file {path} does not exist") from None
    try:
        data = tomllib.loads(raw.decode())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"baseline file {path} is not valid TOML: {exc}") from None
    profile = data.pop("profile", None)
    passes = data.pop("passes", [])
    if not isinstance(passes, list) or not all(isinstance(p, str) for p in passes):
        raise ValueError(f"{path}: passes must be a list of cell ids")
    entries = {cell_id: Expectation(Outcome.PASS) for cell_id in passes}
    for cell_id, entry in data.items():
        if not isinstance(entry, dict) or "outcome" not in entry:
            raise ValueError(f'{path}: entry [{cell_id!r}] needs an outcome = "..." line')
        try:
            outcome = Outcome(entry["outcome"])
        except ValueError:
            raise ValueError(
                f"{path}: [{cell_id!r}] outcome {entry['outcome']!r} is not one of {[o.value for o in Outcome]}"
            ) from None
        if outcome in NEVER_EXPECTED:
            raise ValueError(
                f"{path}: [{cell_id!r}] outcome {outcome.value!r} is a fault of this suite, never an "
                "expected outcome of a strategy: fix the harness instead"
            )
        unknown = set(entry) - {"outcome", "reason", "link", "torch", "backend", "findings", "unexplained"}
        if unknown:
            raise ValueError(f"{path}: [{cell_id!r}] has unknown keys {sorted(unknown)}")
        if entry.get("torch"):
            version_matches("0", str(entry["torch"]))  # a malformed range is a clear error now
        lists = {}
        for key in ("findings", "unexplained"):
            value = entry.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{path}: [{cell_id!r}] {key} must be a list of strings")
            lists[key] = tuple(value)
        entries[cell_id] = Expectation(
            outcome,
            str(entry.get("reason", "")),
            str(entry.get("link", "")),
            str(entry.get("torch", "")),
            str(entry.get("backend", "")),
            lists["findings"] if "findings" in entry else None,
            lists["unexplained"],
        )
    findings = tuple(load_findings() if findings is None else findings)
    known = {f.id for f in findings}
    unknown_ids = sorted({i for e in entries.values() for i in e.findings or () if i not in known})
    if unknown_ids:
        raise ValueError(f"{path}: entries name findings that reports/findings.toml lacks: {unknown_ids}")
    old_form = tuple(
        # a failing outcome whose records the entry does not name; an unsupported or skipped
        # cell records nothing, and --update-baseline writes it without findings
        sorted(i for i, e in entries.items() if e.outcome in FAILING and e.findings is None)
    )
    return Baseline(entries, profile, hashlib.sha256(raw).hexdigest(), str(path), findings, old_form)


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def render_baseline(
    results: list[CellResult],
    header: str,
    profile: str | None = None,
    previous: Baseline | None = None,
    findings: list[Finding] | None = None,
) -> str:
    """A baseline TOML from a run: the passing cells by id, then an entry per other cell with
    its outcome and, as its reason and link, the finding that explains it (reports/findings.toml),
    else the first line of its detail (links and conditions of a previous baseline's entries
    with the same outcome are kept when no finding explains the cell)."""

    findings = load_findings() if findings is None else findings

    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    if profile:
        lines.append(f"profile = {_toml_string(profile)}")
    passes = sorted(r.id for r in results if r.outcome is Outcome.PASS)
    lines.append("passes = [")
    lines += [f"    {_toml_string(cell_id)}," for cell_id in passes]
    lines.append("]")
    for result in sorted(results, key=lambda r: r.id):
        if result.outcome is not Outcome.PASS and result.outcome not in NEVER_EXPECTED:
            old = previous.entries.get(result.id) if previous else None
            attribution = attribute(result, findings)
            found = attribution.findings
            keep = not found and old is not None and old.outcome == result.outcome
            reason = old.reason if keep and old else first_line(result.detail)
            if found:
                reason = f"{found[0].kind}: {found[0].title} [{found[0].id}]"
            lines += [
                "",
                f"[{_toml_string(result.id)}]",
                f"outcome = {_toml_string(result.outcome.value)}",
                f"reason = {_toml_string(reason)}",
            ]
            if result.outcome in FAILING:
                lines.append(f"findings = [{', '.join(_toml_string(f.id) for f in found)}]")
                signatures = sorted({r.signature for r in attribution.unexplained})
                if signatures:
                    lines.append("unexplained = [")
                    lines += [f"    {_toml_string(sig)}," for sig in signatures]
                    lines.append("]")
            if found and found[0].link:
                lines.append(f"link = {_toml_string(found[0].link)}")
            if keep and old:
                lines += [
                    f"{k} = {_toml_string(v)}"
                    for k, v in (("link", old.link), ("torch", old.torch), ("backend", old.backend))
                    if v
                ]
    return "\n".join(lines) + "\n"


def known_failures(results: list[CellResult], baseline: Baseline | None) -> dict[str, Expectation]:
    """The cells whose failure the baseline expects (same outcome), for the tables' legend
    word "known" with the entry's reason and link."""
    if baseline is None:
        return {}
    import torch

    out = {}
    for result in results:
        entry = baseline.expected(result.id, torch.__version__, str(result.axes.get("backend", "")))
        if judge(result, entry, baseline.findings).kind == "known":
            out[result.id] = entry  # type: ignore[assignment]
    return out

"""The findings' standalone scripts, run and recorded: which script exited 1 ("BUG PRESENT") on
which torch, at which version of the script.

`python -m conformance reproduce` runs each bug's script (reports/findings/repro/) under this
python's torch, or an older version's cached venv for a bug of older torch only, or a pair of
venvs for a bug across versions, prints each result as it ends, and records every script that
reproduced in reports/findings/verified.json: its sha256, the torch it ran under, the versions
of the frameworks it needs, the time it took. tests/test_findings.py runs a script only where no
record matches it: a script changed since, another torch, other frameworks; the record makes
the run of the suite's own tests cheaper, never a script unverified (`--all` runs every one
again; CONFORMANCE_RERUN_REPRO=1 makes the test ignore the record)."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from conformance.findings import Finding, load_findings
from conformance.versions.venv import TorchVenv, default_root

ROOT = Path(".")  # the repository's root: a command runs there, as publish and history do
VERIFIED = Path("reports/findings/verified.json")  # relative to it
TIMEOUT_S = 300


@dataclass(frozen=True)
class Run:
    """What one run of a script gave: its exit status and its output."""

    returncode: int
    output: str

    @property
    def reproduced(self) -> bool:
        return self.returncode == 1 and "BUG PRESENT" in self.output

    @property
    def cannot_show_here(self) -> str | None:
        """The reason a script gave for not showing its bug here (exit 2, "CANNOT SHOW HERE:")."""
        if self.returncode == 2 and "CANNOT SHOW HERE:" in self.output:
            return self.output.split("CANNOT SHOW HERE:", 1)[1].strip().splitlines()[0]
        return None


class Unavailable(Exception):
    """The venvs a script needs are not made here (the message names them)."""


def torch_key(finding: Finding) -> str:
    """The torch a script runs under: this python's version, an older version's venv, or a pair."""
    if finding.repro_pair:
        return "->".join(finding.repro_pair)
    if finding.repro_torch:
        return finding.repro_torch
    import torch

    return torch.__version__


def missing_frameworks(finding: Finding) -> list[str]:
    """What the script needs besides torch that this python cannot import."""
    return [name for name in finding.frameworks if importlib.util.find_spec(name) is None]


def frameworks(finding: Finding) -> dict[str, str]:
    """The installed versions of what the script needs besides torch (this python's)."""
    return {name: importlib.metadata.version(name) for name in finding.frameworks}


def sha256(finding: Finding, root: Path = ROOT) -> str:
    return hashlib.sha256((root / finding.repro).read_bytes()).hexdigest()


def _pythons(versions: tuple[str, ...], why: str) -> list[str]:
    venvs = [TorchVenv(v, default_root()) for v in versions]
    absent = [v.version for v in venvs if not v.python.exists()]
    if absent:
        raise Unavailable(
            f"{why}: no venv of {absent} under {default_root()} "
            "(python -m conformance publish --torch V --install-only)"
        )
    return [str(v.python) for v in venvs]


def run_script(finding: Finding, root: Path = ROOT) -> Run:
    """Run a bug's script as its finding says (Unavailable where its venvs are not made)."""

    def run(python: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, finding.repro, *args], cwd=root, capture_output=True, text=True, timeout=TIMEOUT_S
        )

    if finding.repro_pair:
        saving, loading = _pythons(
            finding.repro_pair,
            f"{finding.repro} saves with torch {finding.repro_pair[0]} and loads with {finding.repro_pair[1]}",
        )
        with tempfile.TemporaryDirectory() as tmp:
            saved = run(saving, "save", tmp)
            if saved.returncode != 0:
                return Run(2, f"the save under {finding.repro_pair[0]} failed:\n{saved.stdout}{saved.stderr}")
            proc = run(loading, "load", tmp)
    elif finding.repro_torch:
        why = f"{finding.repro} shows a bug of torch {finding.repro_torch}, fixed in this suite's own"
        proc = run(_pythons((finding.repro_torch,), why)[0])
    else:
        proc = run(sys.executable)
    return Run(proc.returncode, proc.stdout + proc.stderr)


def load_records(root: Path = ROOT) -> list[dict[str, object]]:
    path = root / VERIFIED
    return json.loads(path.read_text())["runs"] if path.exists() else []


def record_of(
    finding: Finding, root: Path = ROOT, records: list[dict[str, object]] | None = None
) -> dict[str, object] | None:
    """The record of a run that reproduced this finding's script as it is now, under this torch
    and these frameworks; None where there is none. records: those read already (default: the
    file's)."""
    want = {"finding": finding.id, "sha256": sha256(finding, root), "torch": torch_key(finding)}
    for record in load_records(root) if records is None else records:
        if all(record.get(k) == v for k, v in want.items()) and record.get("frameworks") == frameworks(
            finding
        ):
            return record
    return None


def save_records(records: list[dict[str, object]], root: Path = ROOT) -> None:
    records = sorted(records, key=lambda r: (str(r["finding"]), str(r["torch"])))
    text = json.dumps({"about": __doc__.split("\n\n")[0], "runs": records}, indent=1)
    (root / VERIFIED).write_text(text + "\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="run every script, the recorded ones too")
    parser.add_argument("--finding", action="append", default=[], help="only this finding (repeatable)")


def main(args: argparse.Namespace) -> int:
    """Run the scripts no record matches (all of them with --all); record those that reproduced.
    Exit 1 when some script did not reproduce (it says why), 0 otherwise."""
    bugs = [f for f in load_findings() if f.kind == "bug"]
    unknown = sorted(set(args.finding) - {f.id for f in bugs})
    if unknown:
        print(f"no bug finding {unknown}", file=sys.stderr)
        return 2
    chosen = [f for f in bugs if not args.finding or f.id in args.finding]
    records = load_records()
    failed = 0
    for i, finding in enumerate(chosen, 1):
        head = f"[{i}/{len(chosen)}] {finding.id}"
        missing = missing_frameworks(finding)
        if missing:
            print(f"{head}: not run: it needs {missing}", flush=True)
            continue
        if not args.all and record_of(finding, records=records):
            print(f"{head}: recorded, unchanged", flush=True)
            continue
        start = time.monotonic()
        try:
            run = run_script(finding)
        except Unavailable as exc:
            print(f"{head}: not run: {exc}", flush=True)
            continue
        seconds = round(time.monotonic() - start, 1)
        if run.reproduced:
            key = {"finding": finding.id, "torch": torch_key(finding)}
            records = [r for r in records if any(r.get(k) != v for k, v in key.items())]
            records.append(
                {
                    **key,
                    "repro": finding.repro,
                    "sha256": sha256(finding),
                    "frameworks": frameworks(finding),
                    "exit": run.returncode,
                    "seconds": seconds,
                    "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                }
            )
            save_records(records)
            print(f"{head}: BUG PRESENT (exit 1, {seconds} s), recorded", flush=True)
        elif run.cannot_show_here:
            print(f"{head}: cannot show here: {run.cannot_show_here}", flush=True)
        else:
            failed += 1
            print(
                f"{head}: did NOT reproduce (exit {run.returncode}, {seconds} s):\n{run.output[-3000:]}",
                flush=True,
            )
    return 1 if failed else 0

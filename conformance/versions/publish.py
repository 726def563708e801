"""`python -m conformance publish --torch 2.12.1`: the table of one torch version, into
reports/torch-<version>-<hardware>-<backend>/ (a `-<matrix>` suffix for a profile other than
default). With --torch, that version's cached venv (conformance.versions.venv) runs the
matrix; without it, the interpreter running this command does. The matrix runs from this
checkout under pytest, as the README's command runs it, with pytest's progress shown; the
run's results (gzipped: results.json.gz), matrix.md, matrix.html and FINDINGS.md land in the
directory, and a
table that was there before is compared with the new one (`python -m conformance diff`).

Exit status: 0 when the table was published (cells that do not pass are what a table is
for), 1 when the run had a harness-error (a fault of the suite: never published as a
result) or wrote no results, 2 when the venv could not be made."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.outcome import CellResult, Outcome
from conformance.report.results import gzip_results, read_results, results_file
from conformance.report.write import outcome_summary
from conformance.versions.venv import InstallError, TorchVenv, default_root, ensure

CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Interpreter:
    """What a run's python has: its torch and whether it sees GPUs."""

    python: Path
    torch: str  # e.g. 2.11.0+cu130
    gpus: int

    @property
    def version(self) -> str:
        return self.torch.split("+")[0]


def probe(python: Path) -> Interpreter:
    code = "import json, torch; print(json.dumps([torch.__version__, torch.cuda.device_count()]))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    version, gpus = json.loads(out.stdout.strip().splitlines()[-1])
    return Interpreter(python, str(version), int(gpus))


def report_dir(reports: Path, interpreter: Interpreter, backend: str, matrix: str) -> Path:
    """reports/torch-<version>-<hardware>-<backend>[-<matrix>]: the backend the ranks ran on and
    its hardware (auto where the machine has GPUs: nccl for the worlds they hold, gloo beyond;
    each cell's axes say which; auto without GPUs is gloo)."""
    if backend == "auto" and not interpreter.gpus:
        backend = "gloo"
    hardware = "cpu" if backend == "gloo" else "cuda"
    suffix = "" if matrix == "default" else f"-{matrix}"
    return reports / f"torch-{interpreter.version}-{hardware}-{backend}{suffix}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--torch", metavar="VERSION", help="the torch version (its cached venv); default: this python's"
    )
    parser.add_argument("--matrix", default="default", help="the profile (default: default)")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl", "auto"))
    parser.add_argument("-n", "--workers", default="2", help="pytest-xdist workers (default: 2; 0: none)")
    parser.add_argument(
        "--venvs", type=Path, default=None, help=f"where the venvs are cached (default: {default_root()})"
    )
    parser.add_argument(
        "--reports", type=Path, default=CHECKOUT / "reports", help="default: this checkout's reports/"
    )
    parser.add_argument(
        "--no-adapters",
        action="store_true",
        help="a new venv without the adapters' frameworks and checkpoint libraries",
    )
    parser.add_argument("--install-only", action="store_true", help="make the venv, run nothing")
    parser.add_argument(
        "--add",
        action="store_true",
        help="run only the cells the pytest arguments select (e.g. -- --strategy deepspeed) and add "
        "them to the published table, which keeps its other cells (conformance.versions.supplement)",
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")


def say(text: str) -> None:
    print(f"[publish] {text}", flush=True)


def publish(args: argparse.Namespace) -> int:
    if not (CHECKOUT / "cases").is_dir():
        say(f"no cases/ beside the package ({CHECKOUT}): run this from a checkout of the suite")
        return 2
    python = Path(sys.executable)
    if args.torch:
        venv = TorchVenv(args.torch, args.venvs or default_root())
        try:
            ensure(venv, CHECKOUT, adapters=not args.no_adapters, say=say)
        except InstallError as exc:
            say(f"could not make the venv of torch {args.torch}: {exc}")
            return 2
        python = venv.python
    if args.install_only:
        return 0
    interpreter = probe(python)
    out = report_dir(args.reports, interpreter, args.backend, args.matrix)
    say(f"torch {interpreter.torch} ({python}): --matrix {args.matrix} --backend {args.backend} -> {out}")
    if args.add:
        return _add(python, out, args)
    with tempfile.TemporaryDirectory() as tmp:
        previous = _previous(out, Path(tmp))
        code = _run(python, out, args)
        if not (out / "results.json").exists():
            say(f"pytest exited {code} and wrote no results.json")
            return 1
        _answer_unknowns(out)
        cells = _compare(previous, gzip_results(out))
    faults = sum(c.outcome is Outcome.HARNESS_ERROR for c in cells)
    say(f"published {out}: {outcome_summary(cells)}")
    if faults:
        say(f"{faults} harness-error: faults of the suite, listed first in {out / 'matrix.md'}")
        return 1
    return 0


def _add(python: Path, out: Path, args: argparse.Namespace) -> int:
    """--add: the selected cells run into a scratch directory, then join the published table."""
    from conformance.report.write import write_reports
    from conformance.versions.supplement import SupplementError, supplement

    if not args.pytest_args:
        say("--add needs the cells to add: pytest arguments after --, e.g. -- --strategy deepspeed")
        return 2
    if not results_file(out).exists():
        say(f"--add: no published table at {out}; publish it whole first")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "added"
        previous = _previous(out, Path(tmp))
        code = _run(python, scratch, args)
        if not (scratch / "results.json").exists():
            say(f"pytest exited {code} and wrote no results.json")
            return 1
        try:
            env, cells = supplement(previous, scratch / "results.json", list(args.pytest_args))
        except SupplementError as exc:
            say(f"--add: not published: {exc}")
            return 1
        added = read_results(scratch / "results.json")[1]
        if any(c.outcome is Outcome.HARNESS_ERROR for c in added):
            say(f"--add: not published: the added cells had a harness-error ({outcome_summary(added)})")
            return 1
        write_reports(out, _answered(env, cells), cells)
        cells = _compare(previous, gzip_results(out))
    say(f"published {out}: {outcome_summary(cells)} ({outcome_summary(added)} of them added now)")
    return 0


def _answer_unknowns(out: Path) -> None:
    """The published table's unknown entries answered from the full declaration (n/a, or still
    unknown: report.applicable), stored in its results and rendered (the run wrote them without)."""
    from conformance.report.write import write_reports

    env, cells = read_results(results_file(out))
    write_reports(out, _answered(env, cells), cells)


def _answered(env: dict[str, Any], cells: list[CellResult]) -> dict[str, Any]:
    """The run's metadata with its unknown entries answered from the full declaration."""
    from conformance.report.applicable import with_not_applicable

    env = with_not_applicable(env, cells)
    say(
        f"the unknown entries answered from the full declaration: {len(env['not_applicable']['answers'])} n/a"
    )
    return env


def _previous(out: Path, tmp: Path) -> Path:
    """A copy of the table published in `out` before this run (a path that does not exist when
    there was none), kept as it was, gzipped or not."""
    published = results_file(out)
    previous = tmp / f"previous-{published.name}"
    if published.exists():
        shutil.copy(published, previous)
    return previous


def checkout_env() -> dict[str, str]:
    """The environment of a run in another venv: this checkout first on PYTHONPATH, so the code
    that runs is the checkout's whatever the venv holds."""
    path = os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _run(python: Path, out: Path, args: argparse.Namespace) -> int:
    cmd = [str(python), "-m", "pytest", "cases", "--matrix", args.matrix, "--backend", args.backend]
    cmd += ["--report-dir", str(out), "-p", "no:cacheprovider", "-q"]
    if args.workers not in ("0", ""):
        cmd += ["-n", args.workers]
    cmd += list(args.pytest_args)
    say("$ " + " ".join(cmd))
    start = time.monotonic()
    code = subprocess.run(cmd, cwd=CHECKOUT, env=checkout_env()).returncode
    say(f"pytest exited {code} after {time.monotonic() - start:.0f} s")
    return code


def _compare(previous: Path, new: Path) -> list[CellResult]:
    """The new table's cells; the published table before this run compared with them, as
    `conformance diff` shows it."""
    from conformance.report.diff import diff_runs

    _, new_cells = read_results(new)
    if not previous.exists():
        return new_cells
    try:
        _, old_cells = read_results(previous)
    except (OSError, ValueError, KeyError) as exc:
        say(f"the table there before could not be read ({exc}); not compared")
        return new_cells
    d = diff_runs(old_cells, new_cells)
    say(
        f"against the table there before: {len(d.added)} added, {len(d.removed)} removed, "
        f"{len(d.improved)} improved, {len(d.regressed)} regressed, {len(d.changed)} changed "
        f"(python -m conformance diff OLD {new} for each cell)"
    )
    return new_cells

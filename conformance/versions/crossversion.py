"""`python -m conformance crossversion --torch 2.11.0 2.12.1 2.13.0`: checkpoints across torch
versions. Each version saves the configurations of crossgrid.CONFIGS once, in its own cached
venv; each pair (X, Y) then loads X's checkpoints in Y's venv and compares bitwise. The pairs:
every version with itself (what the same version does, so that a cross-version cell is read
against it), every ordered pair of adjacent versions, and oldest <-> newest. Each pair's cells
go to reports/crossversion/torch-X-to-Y/results.json, and the grid to
reports/crossversion/README.md."""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

from conformance.report.history import version_key
from conformance.versions.publish import CHECKOUT, checkout_env, say
from conformance.versions.venv import InstallError, TorchVenv, default_root, ensure


def pairs(versions: list[str]) -> list[tuple[str, str]]:
    """(save, load): each with itself, adjacent both ways, oldest <-> newest; in version order."""
    ordered = sorted(set(versions), key=version_key)
    out = [(v, v) for v in ordered]
    for a, b in itertools.pairwise(ordered):
        out += [(a, b), (b, a)]
    if len(ordered) > 2:
        out += [(ordered[0], ordered[-1]), (ordered[-1], ordered[0])]
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--torch", nargs="+", required=True, metavar="VERSION", help="two or more torch versions"
    )
    parser.add_argument(
        "--venvs", type=Path, default=None, help=f"where the venvs are cached (default: {default_root()})"
    )
    parser.add_argument("--out", type=Path, default=CHECKOUT / "reports" / "crossversion")


def _side(python: Path, *args: str) -> int:
    cmd = [str(python), "-m", "conformance.versions.crossgrid", *args]
    say("$ " + " ".join(cmd))
    return subprocess.run(cmd, cwd=CHECKOUT, env=checkout_env()).returncode


def crossversion(args: argparse.Namespace) -> int:
    versions = sorted(set(args.torch), key=version_key)
    if len(versions) < 2:
        say("give two or more versions")
        return 2
    pythons = {}
    for v in versions:
        venv = TorchVenv(v, args.venvs or default_root())
        try:
            ensure(venv, CHECKOUT, say=say)
        except InstallError as exc:
            say(f"could not make the venv of torch {v}: {exc}")
            return 2
        pythons[v] = venv.python
    failed = []
    with tempfile.TemporaryDirectory(prefix="crossversion-") as tmp:
        for v in versions:
            say(f"torch {v}: saving every configuration")
            if _side(pythons[v], "save", "--out", f"{tmp}/{v}"):
                failed.append(f"save in {v}")
        for x, y in pairs(versions):
            say(f"saved by torch {x}, loaded by torch {y}")
            out = args.out / f"torch-{x}-to-{y}" / "results.json"
            if _side(pythons[y], "load", "--saved", f"{tmp}/{x}", "--out", str(out)):
                failed.append(f"load of {x} in {y}")
    from conformance.outcome import Outcome
    from conformance.report.crossversion import read_pairs, write_grid

    written = write_grid(args.out)
    say(f"wrote {written}")
    faults = [
        c.id for cells in read_pairs(args.out).values() for c in cells if c.outcome is Outcome.HARNESS_ERROR
    ]
    if faults:
        say(f"{len(faults)} harness-error (faults of the suite, no verdict): " + ", ".join(faults))
    if failed:
        say("these sides did not finish (a fault of the suite): " + ", ".join(failed))
    return 1 if faults or failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m conformance.versions.crossversion")
    add_arguments(parser)
    sys.exit(crossversion(parser.parse_args()))

"""Cells per check of each profile (run and unsupported), and optionally the wall time of the
same pytest selection under two profiles, one after the other (nothing else should run).

    python bench/profiles.py                        # the counts
    python bench/profiles.py --time default-product default -k "corrupt or resume" -n 2
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from conformance.case import Transfer
from conformance.matrix import CHECKS, PROFILES, cells, transfer_unsupported_reason, unsupported_reason


def counts() -> None:
    print(f"{'check':<10}" + "".join(f"{p:>22}" for p in PROFILES))
    for check in CHECKS:
        row = []
        for profile in PROFILES:
            cs = cells(profile, check)
            bad = sum(
                1
                for c in cs
                if (transfer_unsupported_reason(c) if isinstance(c, Transfer) else unsupported_reason(c))
            )
            row.append(f"{len(cs) - bad} run, {bad} unsup.")
        print(f"{check:<10}" + "".join(f"{r:>22}" for r in row))


def timed(profiles: list[str], pytest_args: list[str]) -> None:
    for profile in profiles:
        start = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "cases",
                "-q",
                "-p",
                "no:cacheprovider",
                "--matrix",
                profile,
                "--report-dir",
                f"reports/runs/bench-{profile}",
                *pytest_args,
            ],
            capture_output=True,
            text=True,
        )
        tail = [
            line
            for line in proc.stdout.splitlines()
            if " in " in line and ("passed" in line or "failed" in line)
        ]
        print(
            f"{profile}: {time.monotonic() - start:.0f} s, exit {proc.returncode}: {tail[-1] if tail else ''}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--time", nargs=2, metavar="PROFILE", help="two profiles to time side by side")
    args, rest = parser.parse_known_args()
    counts()
    if args.time:
        timed(args.time, rest)


if __name__ == "__main__":
    main()

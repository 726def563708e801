"""The wall time of one pytest command in several checkouts of the suite, one after the other
(nothing else should run): a change against the commit before it, e.g. the gated ci slice.

    python bench/checkouts.py OLD_CHECKOUT NEW_CHECKOUT -- cases --matrix ci -n 2 \
        --hypothesis-profile ci --baseline reports/baseline/ci.toml

Each checkout runs with its own code first on the import path and this interpreter; pytest's
summary line, the wall time and where its results went (a new temporary folder) are printed per
checkout.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkouts", nargs="+", type=Path)
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    if not extra:
        parser.error("the pytest arguments come after --")
    for checkout in args.checkouts:
        checkout = checkout.resolve()
        report = tempfile.mkdtemp(prefix=f"bench-{checkout.name}-")
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *extra, "--report-dir", report, "-q", "-p", "no:cacheprovider"],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - start
        summary = next((line for line in reversed(proc.stdout.splitlines()) if " in " in line), "?")
        print(
            f"{checkout}: exit {proc.returncode}, {wall:.1f} s wall; {summary}; results in {report}",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""What the parallel layouts (issue 26) add to the default profile's wall time, on this machine:

    python bench/layouts.py [-n 2]

runs `pytest cases --matrix default -k "<every new cell>"` (the llama, mlp_scalar and
moe_dtensor models: the layouts' round trips, resumes, hygiene and relayouts, and the scalar
model in the old slices) and the rest of the default profile (`-k "not (...)"`), one after the
other, and prints each one's wall time and cell count. Their sum is the profile; the first is
what the layouts added.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEW = "llama or mlp_scalar or moe_dtensor"


def run(selection: str, workers: str, out: Path) -> tuple[float, int]:
    command = [sys.executable, "-m", "pytest", "cases", "--matrix", "default", "-q", "-p", "no:cacheprovider"]
    start = time.monotonic()
    subprocess.run(
        [*command, "-n", workers, "-k", selection, "--report-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    return wall, len(json.loads((out / "results.json").read_text())["cells"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", default="2", help="pytest-xdist workers (default 2)")
    parser.add_argument("--only-new", action="store_true", help="time the new cells only")
    args = parser.parse_args()
    selections = (
        {"layouts (new)": NEW} if args.only_new else {"layouts (new)": NEW, "the rest": f"not ({NEW})"}
    )
    with tempfile.TemporaryDirectory() as tmp:
        for label, selection in selections.items():
            wall, cells = run(selection, args.n, Path(tmp) / label.split()[0])
            print(f"{label}: {cells} cells in {wall:.0f} s (-n {args.n})", flush=True)


if __name__ == "__main__":
    main()

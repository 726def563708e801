"""The matrix with and without pytest-xdist, side by side, on this machine:

    python bench/xdist.py --matrix default

runs `pytest cases --matrix M` once per variant (-n 0; -n 2 --dist load; -n 2 --dist
loadgroup, the world-size groups of the plugin), one after another, and prints each one's
wall time, how many worlds each process started, and whether every cell's outcome equals the
-n 0 run's (the same cell ids, the same outcome words).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "-n 0": ["-n", "0"],
    "-n 2 --dist load": ["-n", "2", "--dist", "load"],
    "-n 2 --dist loadgroup": ["-n", "2", "--dist", "loadgroup"],
}


def run(matrix: str, extra: list[str], out: Path) -> tuple[float, dict[str, str], str]:
    command = [sys.executable, "-m", "pytest", "cases", "--matrix", matrix, "-q", "-p", "no:cacheprovider"]
    start = time.monotonic()
    proc = subprocess.run(
        [*command, *extra, "--report-dir", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    wall = time.monotonic() - start
    cells = json.loads((out / "results.json").read_text())["cells"]
    worlds = re.search(r"worlds started: (.*)", proc.stdout)
    return wall, {c["id"]: c["outcome"] for c in cells}, worlds.group(1) if worlds else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--matrix", default="default")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="default: all")
    parser.add_argument("--keep", type=Path, help="keep each variant's reports in KEEP/<variant>")
    args = parser.parse_args()
    reference: dict[str, str] | None = None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        for name in args.variant or list(VARIANTS):
            wall, outcomes, worlds = run(
                args.matrix, VARIANTS[name], where / name.replace(" ", "_").replace("--", "")
            )
            reference = reference if reference is not None else outcomes
            same = (
                "yes"
                if outcomes == reference
                else f"NO ({sum(outcomes.get(k) != v for k, v in reference.items())} differ)"
            )
            rows.append((name, f"{wall // 60:.0f} min {wall % 60:.0f} s", len(outcomes), worlds, same))
            print(
                f"{name}: {rows[-1][1]}, {len(outcomes)} cells, worlds started {worlds}, same outcomes: {same}",
                flush=True,
            )
    print("\n| variant | wall | cells | worlds started | same outcomes as the first |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The time to compute every registered strategy's cells (what collection pays for them, in the
pytest process and in each xdist worker), and a digest of the ids, so that two checkouts can be
compared side by side: same digest, different time.

    python bench/strategy_cells.py                      # ci, default and full
    git worktree add /tmp/old <commit> && (cd /tmp/old && PYTHONPATH=. python bench/strategy_cells.py)
"""

from __future__ import annotations

import argparse
import hashlib
import time

from conformance.check.registry import CHECKS
from conformance.matrix.cells import strategy_cells
from conformance.strategy.registry import build_registry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="*", default=["ci", "default", "full"])
    args = parser.parse_args()
    registry = build_registry([])
    digest = hashlib.sha256()
    count = 0
    start = time.perf_counter()
    for profile in args.profiles:
        for check in CHECKS:
            for _, strategy in sorted(registry.strategies.items()):
                for cell in strategy_cells(strategy, profile, check):
                    digest.update(f"{profile} {cell.id}\n".encode())
                    count += 1
    seconds = time.perf_counter() - start
    print(
        f"{count} cells of {len(registry.strategies)} strategies in {seconds:.1f} s, ids {digest.hexdigest()[:16]}"
    )


if __name__ == "__main__":
    main()

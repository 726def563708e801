"""Harness overhead per cell: N round trips through the harness vs. bare, in one warm world.

    python bench/overhead.py --cells 30 --case fsdp2-dsd_sharded-dcp-adamw-mlp-w2

harness: N cells sent one by one through WorldPool.run (message, per-cell reset, sub-group
teardown, gc, result transfer, cell directory). bare: one cell that runs the same N round
trips back to back with no harness in between. Both run the same run_roundtrip code in the
same already-started world; the world start is excluded from both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bare import Bare, bare_loop  # a module: ranks import cell functions by name

from conformance.case import Case, seed_of
from conformance.check.roundtrip import RoundTrip, run_roundtrip
from conformance.matrix import cases
from conformance.world import WorldPool


def measure(case: Case, n: int, repeats: int) -> dict[str, Any]:
    spec, seed = RoundTrip(case), seed_of(case)
    harness, bare = [], []
    with WorldPool() as pool:
        assert (
            pool.run("gloo", case.world_size, run_roundtrip, spec, timeout_s=120, seed=seed).status == "ok"
        )  # warm
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(n):
                run = pool.run("gloo", case.world_size, run_roundtrip, spec, timeout_s=120, seed=seed)
                assert run.status == "ok" and not run.values[0]["failures"], run.detail
            harness.append(time.perf_counter() - start)
            run = pool.run("gloo", case.world_size, bare_loop, Bare(spec, n), timeout_s=600, seed=seed)
            assert run.status == "ok", run.detail
            bare.append(max(run.values))
    h, b = statistics.median(harness), statistics.median(bare)
    return {"case": case.id, "cells": n, "harness_s": h, "bare_s": b, "overhead": h / b - 1}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", action="append", help="cell id (default: two of the ci matrix)")
    args = parser.parse_args()
    by_id = {c.id: c for c in cases("full")}
    ids = args.case or [
        "fsdp2-dsd_sharded-dcp-adamw-mlp-w2",
        "fsdp1_full_shard-sd_sharded-torch_save_per_rank-adamw-mlp-w2",
    ]
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        parser.error(f"unknown cell ids {unknown}")
    print(f"{'cell':<62} {'cells':>5} {'harness s':>10} {'bare s':>8} {'per cell ms':>12} {'overhead':>9}")
    for cell_id in ids:
        r = measure(by_id[cell_id], args.cells, args.repeats)
        per_cell = (r["harness_s"] - r["bare_s"]) / r["cells"] * 1000
        print(
            f"{r['case']:<62} {r['cells']:>5} {r['harness_s']:>10.2f} {r['bare_s']:>8.2f} {per_cell:>12.1f} {r['overhead']:>8.1%}"
        )


if __name__ == "__main__":
    main()

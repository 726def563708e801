"""The bare side of bench/overhead.py: N round trips in one cell, no harness in between."""

from __future__ import annotations

import time
from dataclasses import dataclass

from conformance.check.roundtrip import RoundTrip, run_roundtrip
from conformance.world import RankContext


@dataclass(frozen=True)
class Bare:
    spec: RoundTrip
    n: int


def bare_loop(ctx: RankContext, arg: Bare) -> float:
    start = time.perf_counter()
    for i in range(arg.n):
        cell_dir = ctx.cell_dir / f"bare{i}"
        cell_dir.mkdir(exist_ok=True)
        sub = RankContext(ctx.rank, ctx.world_size, ctx.backend, ctx.device, cell_dir, ctx.seed)
        result = run_roundtrip(sub, arg.spec)
        assert not result["failures"], result["failures"]
    return time.perf_counter() - start

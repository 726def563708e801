"""Fresh worlds, forked vs spawned: N cells of one case, each in a world of its own (as
`--fresh-worlds` runs them), the ranks forked from the template process or spawned.

    farm-bench -n 3 --timeout 600 -- python bench/fresh_worlds.py --launcher fork \
        --vs 'python bench/fresh_worlds.py --launcher spawn'

Each run starts its own template (fork), so the template's one import of torch is counted.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from conformance.case import seed_of
from conformance.check.roundtrip import RoundTrip, run_roundtrip
from conformance.matrix import cases
from conformance.runner import RANK_PRELOAD
from conformance.world import WorldPool
from conformance.world.launcher import ForkLauncher, Launcher, SpawnLauncher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=["fork", "spawn"], required=True)
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--case", default="fsdp2-dsd_sharded-dcp-adamw-mlp-w2")
    args = parser.parse_args()
    case = next(c for c in cases("full") if c.id == args.case)
    spec, seed = RoundTrip(case), seed_of(case)
    root = Path(tempfile.mkdtemp(prefix="bench-fresh-"))
    launcher: Launcher = ForkLauncher(root, RANK_PRELOAD) if args.launcher == "fork" else SpawnLauncher()
    with WorldPool(root, fresh=True, preload=RANK_PRELOAD, launcher=launcher) as pool:
        for _ in range(args.cells):
            run = pool.run("gloo", case.world_size, run_roundtrip, spec, timeout_s=120, seed=seed)
            assert run.status == "ok" and not run.values[0]["failures"], run.detail
        assert pool.started == args.cells


if __name__ == "__main__":
    main()

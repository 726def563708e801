"""Reproduce one round-trip cell outside pytest, under torchrun:

    torchrun --nproc-per-node 2 -m conformance.repro fsdp2-dsd_full-dcp-adamw-mlp-w2

Every rank runs the cell's round trip (the same code, seed and data as in the suite) in the
process group torchrun set up, and rank 0 prints what differs, or the exception. The exit
status is 0 when the round trip holds, 1 when it does not. Short enough to paste into an
upstream bug report together with the suite's version. Other checks than the round trip span
several worlds; rerun those with the pytest command the report gives.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def find_case(cell_id: str):  # type: ignore[no-untyped-def]
    """The round-trip case with this id, from any profile."""
    from conformance.matrix import PROFILES, cases

    for profile in PROFILES:
        for case in cases(profile):
            if case.id == cell_id:
                return case
    raise SystemExit(f"no round-trip cell {cell_id!r} in any profile (ids are in results.json)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torchrun ... -m conformance.repro", description=__doc__)
    parser.add_argument("cell_id")
    parser.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    args = parser.parse_args(argv)
    case = find_case(args.cell_id)
    if "RANK" not in os.environ:
        raise SystemExit(
            f"run it under torchrun: torchrun --nproc-per-node {case.world_size} -m conformance.repro {case.id}"
        )

    import torch
    import torch.distributed as dist

    from conformance.check.roundtrip import RoundTrip, run_roundtrip
    from conformance.runner import case_seed, resolve_backend
    from conformance.world import RankContext

    backend = resolve_backend(args.backend)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if size != case.world_size:
        raise SystemExit(f"{case.id} needs {case.world_size} processes, torchrun started {size}")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    seed = case_seed(case)
    torch.manual_seed(seed)
    shared = [tempfile.mkdtemp(prefix="conformance-repro-") if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    ctx = RankContext(rank, size, backend, device, Path(shared[0]), seed)  # type: ignore[arg-type]
    value = run_roundtrip(ctx, RoundTrip(case))  # an exception ends this rank, as torchrun shows
    everyone: list[list[str] | None] = [None] * size
    dist.all_gather_object(everyone, value["failures"])
    failures = [line for lines in everyone for line in lines or []]
    if rank == 0:
        if failures:
            print(f"{case.id}: {len(failures)} differences after the round trip:")
            print("\n".join(failures))
        else:
            print(f"{case.id}: bitwise equal after the round trip")
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

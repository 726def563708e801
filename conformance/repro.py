"""Reproduce one cell of any check outside pytest, with torchrun as the launcher:

    python -m conformance.repro resume-fsdp2-dsd_sharded-dcp-adamw+sched-mlp-w2

runs the cell's check (the same code, seed and data as in the suite), each of its worlds a
`torchrun --standalone --nproc-per-node N` (printed as it starts: a reshard cell is a save
in N ranks, then a load in M). It prints the outcome and its detail; the exit status is 0
when the cell passes (or refuses as it must), 1 otherwise. A round-trip cell also runs
directly under torchrun, every rank in torchrun's own process group:

    torchrun --nproc-per-node 2 -m conformance.repro fsdp2-dsd_full-dcp-adamw-mlp-w2

Short enough to paste into an upstream bug report together with the suite's version.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from conformance.case import Case, Transfer
from conformance.strategy.registry import Registry, add_strategy_option, build_registry


def find_cell(cell_id: str, registry: Registry | None = None) -> Case | Transfer:
    """The cell with this id, from any profile and check, of the built-in matrix or of a
    registered strategy; or a generated cell of a property (a profile cell's id with a
    generated optimizer schedule and model, conformance.generated)."""
    from conformance.matrix import CHECKS, PROFILES, run_cells

    if cell_id.startswith("property-"):
        raise SystemExit(
            f"{cell_id!r} is a property, not one cell: a failing property names the cell of its "
            "minimal failing example (axes.minimal_cell in results.json, and the 'repro:' line of its "
            "detail); run that one"
        )
    registry = registry or Registry()
    every = {
        cell.id: cell
        for profile in PROFILES
        for check in CHECKS
        for cell in run_cells(registry, profile, check)
    }
    cell = every.get(cell_id) or _generated(cell_id, every)
    if cell is None:
        raise SystemExit(
            f"no cell {cell_id!r} in any profile (ids are in results.json and the reports; a registered "
            "strategy's cell needs the --strategy it ran with)"
        )
    return cell


def _generated(cell_id: str, every: dict[str, Case | Transfer]) -> Case | Transfer | None:
    """A property example's cell: its profile cell (the same id with a fixed optimizer and the
    mlp), with the generated optimizer schedule and model of the id."""
    from conformance.generated import MODEL_PREFIX
    from conformance.property import Property

    tokens = cell_id.split("-")
    at = next((i for i, t in enumerate(tokens) if t.startswith(MODEL_PREFIX)), 0)
    if at < 2:
        return None
    words = {c.optimizer for c in every.values() if isinstance(c, Case)}  # the optimizer words of the matrix
    for optimizer in sorted(words):
        base = every.get("-".join([*tokens[: at - 1], optimizer, "mlp", *tokens[at + 1 :]]))
        if base is not None:
            return Property(base).instantiate(tokens[at], tokens[at - 1])
    return None


def run_under_torchrun(cell: Case | Transfer, registry: Registry, backend: str, timeout_s: float) -> int:
    """Drive the cell's check, each world a torchrun of its own."""
    from conformance.outcome import Outcome
    from conformance.runner import resolve_backend, run_case
    from conformance.world.torchrun import TorchrunPool

    registered = registry.strategy_of(cell)
    with TorchrunPool(echo=True) as pool:
        result = run_case(
            pool,
            cell,
            backend=resolve_backend(backend),
            timeout_s=timeout_s,
            registered=registered,
        )
    print(f"{cell.id}: {result.outcome.value}\n{result.detail}")
    return 0 if result.outcome is Outcome.PASS else 1


def run_in_this_world(case: Case, backend_choice: str) -> int:
    """A round-trip cell, this process one of torchrun's ranks."""
    import torch
    import torch.distributed as dist

    from conformance.case import seed_of
    from conformance.check.roundtrip import RoundTrip, run_roundtrip
    from conformance.runner import resolve_backend
    from conformance.world import RankContext
    from conformance.world.devices import process_group_backend
    from conformance.world.torchrun import torchrun_device

    backend = resolve_backend(backend_choice)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if size != case.world_size:
        raise SystemExit(f"{case.id} needs {case.world_size} processes, torchrun started {size}")
    device = torchrun_device(backend)
    dist.init_process_group(process_group_backend(backend))
    seed = seed_of(case)
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
    # every rank done with the cell before any tears its group down: a rank that destroyed its
    # group and exited while its peer was still in gloo's teardown aborted that peer once in
    # .ci/run ("terminate called without an active exception", SIGABRT after a pass)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.repro",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("cell_id")
    parser.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for each world (default 300)")
    add_strategy_option(
        parser, "a registered strategy (package.module:ATTR or an entry point's name), as in the run"
    )
    args = parser.parse_args(argv)
    try:
        registry = build_registry([*args.strategy, "builtin"])
    except (ValueError, TypeError) as exc:
        raise SystemExit(str(exc)) from None
    cell = find_cell(args.cell_id, registry)
    if "RANK" not in os.environ:
        return run_under_torchrun(cell, registry, args.backend, args.timeout)
    if not isinstance(cell, Case) or cell.check != "roundtrip" or cell.strategy:
        raise SystemExit(
            f"{cell.id} spans several worlds: run `python -m conformance.repro {cell.id}` (not under "
            "torchrun); it starts one torchrun per world"
        )
    return run_in_this_world(cell, args.backend)


if __name__ == "__main__":
    sys.exit(main())

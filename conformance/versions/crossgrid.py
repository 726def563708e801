"""One side of the cross-version grid, run inside one torch version's venv:

    python -m conformance.versions.crossgrid save --out DIR
    python -m conformance.versions.crossgrid load --saved DIR --out results.json

`save` trains each configuration of CONFIGS in a world of its own ranks and saves it, as the
interop check's save phase does, into DIR/<cell id>/, beside the canonical state the saving
rank 0 saw (expected.pkl: tensors as dtype, shape and raw bytes in a plain pickle, so that
reading it back never depends on either torch's serialization) and how the save ended
(saved.json). `load` loads each of those checkpoints into a fresh model of the same
configuration in this torch, compares bitwise with the saved canonical state, and writes the
cells as results.json (check `crossversion`; axes save_torch, load_torch)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import torch

from conformance.case import Case, seed_of
from conformance.check.phases import PhaseError, Phases
from conformance.check.transfer import LoadSpec, SaveSpec, load_phase, load_verdict, save_phase
from conformance.outcome import CellResult, Outcome
from conformance.runner import RANK_PRELOAD
from conformance.strategy.under_test import LOADING_CALLS
from conformance.world import WorldPool

# The main full and sharded rows: DDP, FSDP1 (its state dict types), FSDP2; get/set_state_dict;
# torch.save by rank 0, a file per rank, DCP. (Not FSDP1's own sharded state dict with DCP:
# DCP loads in place and a fresh optimizer's FSDP.optim_state_dict is empty, unsupported in the matrix.)
CONFIGS: tuple[tuple[str, str, str, str], ...] = (
    ("ddp", "replicate", "sd_full", "torch_save"),
    ("ddp", "replicate", "dsd_full", "torch_save"),
    ("ddp", "replicate", "dsd_sharded", "dcp"),
    ("fsdp1", "full_shard", "sd_full", "torch_save"),
    ("fsdp1", "full_shard", "sd_sharded", "torch_save_per_rank"),
    ("fsdp1", "full_shard", "sd_local", "torch_save_per_rank"),
    ("fsdp1", "full_shard", "dsd_full", "torch_save"),
    ("fsdp1", "full_shard", "dsd_sharded", "dcp"),
    ("fsdp2", "shard", "dsd_full", "torch_save"),
    ("fsdp2", "shard", "dsd_sharded", "dcp"),
    ("fsdp2", "shard", "dsd_sharded", "torch_save_per_rank"),
)
WORLD_SIZE = 2
TIMEOUT_S = 300.0


def cases(only: str = "*") -> list[Case]:
    """The configurations' cells, those whose id matches `only` (fnmatch)."""
    every = [Case(w, s, a, st, "adamw", "mlp", WORLD_SIZE) for w, s, a, st in CONFIGS]
    return [c for c in every if fnmatch.fnmatch(c.id, only)]


def version() -> str:
    return torch.__version__.split("+")[0]


def encode(value: Any) -> Any:
    """A canonical state in plain Python: a tensor as its dtype, shape and bytes."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        return {"__tensor__": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "bytes": raw}
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(encode(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot carry a {type(value).__name__} across versions: {value!r}")


def decode(value: Any) -> Any:
    if isinstance(value, dict) and "__tensor__" in value:
        dtype = getattr(torch, value["__tensor__"])
        shape = value["shape"]
        if not value["bytes"]:
            return torch.empty(shape, dtype=dtype)
        flat = torch.frombuffer(bytearray(value["bytes"]), dtype=torch.uint8).view(dtype)
        return flat.reshape(shape).clone()
    if isinstance(value, dict):
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(decode(v) for v in value)
    return value


def _phases(pool: WorldPool, case: Case) -> Phases:
    return Phases(pool, "gloo", TIMEOUT_S, seed=seed_of(case))


def save_all(out: Path, only: str = "*") -> None:
    pool = WorldPool(preload=RANK_PRELOAD)
    try:
        for case in cases(only):
            where = out / case.id
            where.mkdir(parents=True, exist_ok=True)
            status: dict[str, Any] = {"torch": torch.__version__, "outcome": "ok", "detail": ""}
            try:
                saved = _phases(pool, case).run(
                    "save", case.world_size, save_phase, SaveSpec(case, str(where / "checkpoint"))
                )
                (where / "expected.pkl").write_bytes(pickle.dumps(encode(saved[0]["expected"]), protocol=4))
                status["problems"] = [p for value in saved for p in value["problems"]]
            except PhaseError as exc:
                status.update(outcome=exc.outcome.value, detail=exc.detail)
            (where / "saved.json").write_text(json.dumps(status, indent=1))
            print(f"saved {case.id}: {status['outcome']}", flush=True)
    finally:
        pool.close()


def load_one(pool: WorldPool, case: Case, where: Path, saved_by: str) -> tuple[Outcome, str]:
    status = json.loads((where / "saved.json").read_text())
    if status["outcome"] != "ok":
        return Outcome(status["outcome"]), f"the save in torch {saved_by} did not end ok:\n{status['detail']}"
    expected = decode(pickle.loads((where / "expected.pkl").read_bytes()))
    spec = LoadSpec(case, str(where / "checkpoint"), expected)
    try:
        loaded = _phases(pool, case).run("load", case.world_size, load_phase, spec)
    except PhaseError as exc:
        blame = "the load raised" if exc.raised_by(*LOADING_CALLS) else "the load phase ended"
        last = next((line.strip() for line in reversed(exc.detail.splitlines()) if line.strip()), "")
        return exc.outcome, f"{blame} in torch {version()} (saved by torch {saved_by}): {last}\n{exc.detail}"
    where_text = (
        f"saved by torch {saved_by}, loaded by torch {version()}, {case.config} in {case.world_size} ranks"
    )
    return load_verdict(status.get("problems", []), loaded, where_text)


def load_all(saved: Path, out: Path) -> list[CellResult]:
    from conformance.report.environment import environment
    from conformance.report.results import results_document, write_results

    pool = WorldPool(preload=RANK_PRELOAD)
    cells = []
    try:
        for case in cases():
            where = saved / case.id
            if not (where / "saved.json").exists():
                continue
            saved_by = json.loads((where / "saved.json").read_text())["torch"].split("+")[0]
            outcome, detail = load_one(pool, case, where, saved_by)
            axes = {**case.axes(), "check": "crossversion", "save_torch": saved_by, "load_torch": version()}
            axes["backend"] = "gloo"
            cell_id = f"crossversion-{saved_by}-to-{version()}-{case.id}"
            cells.append(CellResult(cell_id, axes, outcome, detail, 0.0))
            print(f"{outcome.value:12} {cell_id}", flush=True)
    finally:
        pool.close()
    env = environment(backend="gloo", world_sizes=[WORLD_SIZE], matrix="crossversion", args=sys.argv[1:])
    write_results(out, results_document(env, cells))
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.versions.crossgrid", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    save = commands.add_parser("save")
    save.add_argument("--out", type=Path, required=True)
    save.add_argument("--only", default="*", help="the configurations whose cell id matches (fnmatch)")
    load = commands.add_parser("load")
    load.add_argument("--saved", type=Path, required=True)
    load.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "save":
        save_all(args.out, args.only)
    else:
        load_all(args.saved, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A slice of the matrix with torchrun as the launcher (torch.distributed.elastic), on one
node or many:

    torchrun --standalone --nproc-per-node 2 --max-restarts 20 \\
        -m conformance.launch --matrix ci -k "roundtrip and fsdp2" --out reports/runs/launch

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        --max-restarts 20 -m conformance.launch --matrix default --out /shared/conformance

Every rank walks the same cell list: the profile's cells of every check (or those of --check),
narrowed by -k as pytest's -k narrows them (words of the id, the check, the kind and wrapper
markers; and / or / not). The launch is one world: each cell whose world it is runs in it, in
torchrun's own process group; a cell that needs another world size, or a second world for a
later phase (resume loads in processes that never ran the save), is a skip that says so.
Rank 0 writes results.json, matrix.md and matrix.html to --out, the pytest run's formats.

Nothing is lost when a rank fails. Rank 0 appends every cell's start and result to
--out/progress.jsonl as it goes. An error on a rank is that cell's result, and the ranks
build a fresh process group before the next cell. A crash (a rank killed by a signal) ends
torchrun's workers; with --max-restarts, torchrun starts them again, and the launch goes on
after the cell it died in, which is recorded as a crash with the dead rank's Python stack.
A hang (a rank that has not answered within --case-timeout) is recorded by the ranks that
did answer, which then exit, so that torchrun restarts the world. Without restarts left,
torchrun stops; run the same command with --resume to go on from progress.jsonl.

The exit status is 0 once the reports are written, whatever the cells' outcomes (torchrun
would restart a world that exits otherwise): gate on results.json (`python -m conformance
diff`), or run the matrix under pytest with --baseline.

--out (and --scratch, where checkpoints go) must be on a filesystem every node sees.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from conformance.case import Case, Transfer
from conformance.outcome import CellResult, Outcome
from conformance.world.launched import LaunchHang, LaunchWorld, torchrun_store

Cell = Case | Transfer


def keyword_haystack(cell: Cell) -> str:
    """The names -k matches, as pytest's: the test function, the id, the markers."""
    return f"test_{cell.check}[{cell.id}] {cell.check} {cell.kind} {cell.family}".lower()


def select(cells: list[Cell], keyword: str | None) -> list[Cell]:
    """The cells a pytest -k expression keeps (its own parser: and, or, not, parentheses)."""
    if not keyword:
        return cells
    from _pytest.mark.expression import Expression

    try:
        expression = Expression.compile(keyword)
    except Exception as exc:  # pytest's ParseError
        raise SystemExit(f"-k {keyword!r}: {exc}") from None

    def keeps(cell: Cell) -> bool:
        haystack = keyword_haystack(cell)
        return expression.evaluate(lambda name, **_: name.lower() in haystack)

    return [cell for cell in cells if keeps(cell)]


@dataclass
class Progress:
    """progress.jsonl: rank 0's record of every cell started and every result, flushed as
    written, so a crash or a stop loses nothing."""

    path: Path
    results: dict[str, CellResult] = field(default_factory=dict)
    unfinished: tuple[str, str] | None = None  # (cell id, attempt tag) started, never finished
    _file: IO[str] | None = None

    def open(self, resume: bool) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume and self.path.exists():
            for line in self.path.read_text().splitlines():
                record = json.loads(line)
                if record["event"] == "start":
                    self.unfinished = (record["id"], record["tag"])
                else:
                    result = CellResult.from_json(record["result"])
                    self.results[result.id] = result
                    if self.unfinished and self.unfinished[0] == result.id:
                        self.unfinished = None
        self._file = self.path.open("a" if resume else "w")

    def _write(self, record: dict[str, Any]) -> None:
        assert self._file is not None
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def start(self, cell_id: str, tag: str) -> None:
        self._write({"event": "start", "id": cell_id, "tag": tag})

    def record(self, result: CellResult) -> None:
        self.results[result.id] = result
        self._write({"event": "result", "result": result.to_json()})


def _fault_log(scratch: Path, tag: str, rank: int) -> Path:
    return scratch / "faults" / f"{tag}-rank{rank}.log"


def _hang_note(scratch: Path, tag: str) -> Path:
    return scratch / "faults" / f"{tag}-hang.txt"


def died_in(cell: Cell, scratch: Path, tag: str, size: int, backend: str) -> CellResult:
    """The result of the cell an earlier attempt's world ended in: the dead rank's Python
    stack (faulthandler's log of that attempt) when it left one; else a hang when the ranks
    that answered left a note saying who did not."""
    stacks = []
    for rank in range(size):
        log = _fault_log(scratch, tag, rank)
        text = log.read_text(errors="replace").strip() if log.exists() else ""
        if text:
            stacks.append(f"rank {rank}:\n{text[-4000:]}")
    axes = {**cell.axes(), "backend": backend}
    if stacks:
        detail = f"a rank died in this cell (torchrun attempt {tag}; restarted):\n" + "\n".join(stacks)
        return CellResult(cell.id, axes, Outcome.CRASH, detail, 0.0)
    if _hang_note(scratch, tag).exists():
        return CellResult(cell.id, axes, Outcome.HANG, _hang_note(scratch, tag).read_text(), 0.0)
    detail = (
        f"the world ended in this cell (torchrun attempt {tag}) and left no Python stack: "
        "killed from outside, or a rank exited on its own"
    )
    return CellResult(cell.id, axes, Outcome.CRASH, detail, 0.0)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from conformance.matrix import CHECKS
    from conformance.run_options import add_run_options

    parser = argparse.ArgumentParser(
        prog="torchrun ... -m conformance.launch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(parser.add_argument)  # --matrix, --backend, --case-timeout, --strategy: as pytest
    parser.add_argument("--check", action="append", choices=sorted(CHECKS), help="default: every check")
    parser.add_argument("-k", dest="keyword", default=None, help="a pytest -k expression over the cells")
    parser.add_argument("--out", type=Path, default=Path("reports/runs/launch"))
    parser.add_argument("--scratch", type=Path, default=None, help="checkpoints (default: OUT/.scratch)")
    parser.add_argument("--resume", action="store_true", help="go on from OUT/progress.jsonl")
    args = parser.parse_args(argv)
    if args.case_timeout <= 0:
        parser.error("--case-timeout must be a positive number of seconds")
    return args


def launch_cells(args: argparse.Namespace, registry: Any) -> list[Cell]:
    from conformance.matrix import CHECKS, run_cells

    checks = sorted(args.check or CHECKS)
    every: list[Cell] = [cell for check in checks for cell in run_cells(registry, args.matrix, check)]
    return select(every, args.keyword)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "RANK" not in os.environ or "TORCHELASTIC_RUN_ID" not in os.environ:
        raise SystemExit(
            "conformance.launch runs under torchrun: torchrun --nproc-per-node N -m conformance.launch ..."
        )
    import torch.distributed as dist

    from conformance.runner import resolve_backend
    from conformance.strategy.registry import build_registry
    from conformance.world.torchrun import torchrun_device

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    tag = f"{os.environ['TORCHELASTIC_RUN_ID']}-{attempt}"
    scratch = args.scratch or args.out / ".scratch"
    _fault_log(scratch, tag, rank).parent.mkdir(parents=True, exist_ok=True)
    faults = _fault_log(scratch, tag, rank).open("w")
    faulthandler.enable(file=faults, all_threads=True)

    try:
        registry = build_registry(args.strategy)
    except (ValueError, TypeError) as exc:
        raise SystemExit(str(exc)) from None
    cells = launch_cells(args, registry)
    if not cells:
        raise SystemExit(f"no cell of the {args.matrix} matrix matches -k {args.keyword!r}")
    backend = resolve_backend(args.backend)
    world = LaunchWorld(
        rank,
        size,
        backend,
        torchrun_device(backend),
        scratch,
        torchrun_store(rank, size),
        tag,
        args.case_timeout,
    )
    world.fresh_group()

    progress = Progress(args.out / "progress.jsonl")
    if rank == 0:
        progress.open(resume=attempt > 0 or args.resume)
        if progress.unfinished is not None:
            cell_id, died_tag = progress.unfinished
            cell = next((c for c in cells if c.id == cell_id), None)
            if cell is not None:
                progress.record(died_in(cell, scratch, died_tag, size, backend))
    shared: list[Any] = [sorted(progress.results)]
    dist.broadcast_object_list(shared, src=0)
    done = set(shared[0])

    try:
        for index, cell in _pending(cells, done):
            world.begin(index)
            if rank == 0:
                progress.start(cell.id, tag)
            result = _run(world, cell, backend, args.case_timeout, registry)
            if rank == 0:
                progress.record(result)
                print(f"[{index + 1}/{len(cells)}] {result.outcome.value:11} {cell.id}", flush=True)
    except LaunchHang as exc:
        _hang_note(scratch, tag).write_text(str(exc))
        print(f"rank {rank}: {exc}", file=sys.stderr, flush=True)
        return 3  # torchrun restarts the world when it has restarts left; the next attempt records it
    if rank == 0:
        _finish(args, progress, cells, backend, registry)
        shutil.rmtree(scratch, ignore_errors=True)
    faulthandler.disable()
    faults.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


def _pending(cells: list[Cell], done: set[str]) -> Iterator[tuple[int, Cell]]:
    return ((i, cell) for i, cell in enumerate(cells) if cell.id not in done)


def _run(world: LaunchWorld, cell: Cell, backend: str, timeout_s: float, registry: Any) -> CellResult:
    from conformance.runner import run_case

    return run_case(world, cell, backend=backend, timeout_s=timeout_s, registered=registry.strategy_of(cell))


def _finish(
    args: argparse.Namespace, progress: Progress, cells: list[Cell], backend: str, registry: Any
) -> None:
    from conformance.report.environment import environment
    from conformance.report.write import outcome_summary, rerun_summary, write_reports

    ids = {cell.id for cell in cells}
    results = [r for r in progress.results.values() if r.id in ids]
    env = environment(
        backend=backend,
        world_sizes=sorted({int(r.axes["world_size"]) for r in results}),
        matrix=args.matrix,
        args=sys.argv[1:],
        strategies=registry.versions(),
        descriptions=registry.descriptions(),
    )
    env["launcher"] = {"torchrun": True, "world_size": int(os.environ["WORLD_SIZE"])}
    write_reports(args.out, env, results)
    reruns = rerun_summary(results)
    print(outcome_summary(results) + (f"\n{reruns}" if reruns else ""), flush=True)
    print(f"results: {args.out / 'results.json'}", flush=True)


def exit_now(code: int) -> None:
    """Ends a rank without the interpreter's teardown. Every result and report is written and
    the process group destroyed by then; what is left is the C++ static destructors, and one
    of torch's aborted a rank there once in CI ("terminate called without an active
    exception", SIGABRT, 2026-11-24, after all six cells had their results), which turned a
    finished launch into a failed torchrun. Nothing of the launch's own runs after this."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())

"""Worlds launched by torchrun: one torchrun per cell (or phase of a cell), no pool of our own.

`TorchrunPool` has the `run` of `WorldPool`, so every check runs through it unchanged: this
is how `python -m conformance.repro CELL_ID` reproduces any cell outside pytest, each phase a
plain `torchrun --standalone --nproc-per-node N -m conformance.world.torchrun JOB` whose
ranks set up their process group the way torchrun users do (`init_process_group(backend)`
from its environment). Slower than the pool's warm worlds (a start per phase); the point is
to be the standard launcher, with nothing of the suite's process management in the way.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.world.attribution import error_status
from conformance.world.cellrun import CellRun
from conformance.world.devices import process_group_backend
from conformance.world.rank import CellFn

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Job:
    fn: CellFn
    arg: Any
    backend: str
    seed: int
    cell_dir: str


def torchrun_command(size: int, job: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(size),
        "-m",
        "conformance.world.torchrun",
        str(job),
    ]


class TorchrunPool:
    """Runs each cell in a fresh torchrun world. `echo` prints each torchrun command."""

    def __init__(self, root: Path | None = None, *, echo: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="conformance-torchrun-", dir=root))
        self.echo = echo
        self._jobs = 0

    def run(
        self,
        backend: str,
        size: int,
        fn: CellFn,
        arg: Any,
        *,
        timeout_s: float,
        seed: int = 0,
        slot: str = "",
    ) -> CellRun:
        self._jobs += 1
        job_dir = self.root / f"job{self._jobs}"
        (job_dir / "cell").mkdir(parents=True)
        job = job_dir / "job.pkl"
        job.write_bytes(pickle.dumps(Job(fn, arg, backend, seed, str(job_dir / "cell"))))
        command = torchrun_command(size, job)
        if self.echo:
            print("$ " + " ".join(command[2:]).replace("torch.distributed.run", "torchrun", 1), flush=True)
        start = time.monotonic()
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            detail = f"torchrun ran over {timeout_s:.0f} s:\n{_tail(output)}"
            return CellRun("hang", detail=detail, duration_s=time.monotonic() - start)
        return _collect(job_dir, size, proc.returncode, output, time.monotonic() - start)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> TorchrunPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tail(text: str, lines: int = 40) -> str:
    """The end of torchrun's output, after the faulthandler's stack of a rank that died."""
    all_lines = text.rstrip().splitlines()
    fatal = next((i for i, line in enumerate(all_lines) if line.startswith("Fatal Python error")), None)
    head = [*all_lines[fatal : fatal + 25], "..."] if fatal is not None else []
    return "\n".join(head + all_lines[-lines:])


def _collect(job_dir: Path, size: int, returncode: int, output: str, duration: float) -> CellRun:
    replies = {}
    for rank in range(size):
        path = job_dir / f"rank{rank}.pkl"
        if path.exists():
            replies[rank] = pickle.loads(path.read_bytes())
    failed = sorted(
        (finished, r, text, raised) for r, (ok, text, finished, raised) in replies.items() if not ok
    )
    errors = [f"rank {r}: {text}" for _, r, text, _ in failed]  # the first to fail leads
    if len(replies) < size:  # a rank died: that is the cause, the others' errors follow from it
        missing = sorted(set(range(size)) - set(replies))
        detail = f"rank(s) {missing} died (torchrun exit {returncode}):\n{_tail(output)}"
        if errors:
            detail += "\n\nsecondary errors of the other ranks:\n" + "\n".join(errors)
        return CellRun("crash", detail=detail, duration_s=duration)
    if errors:
        status = error_status(failed[0][3])
        return CellRun(status, detail="\n".join(errors), duration_s=duration, raised_in=failed[0][3])
    return CellRun("ok", values=[replies[r][1] for r in range(size)], duration_s=duration)


def torchrun_device(backend: str) -> torch.device:
    """This torchrun rank's device: its LOCAL_RANK's GPU for nccl, else the CPU."""
    import torch

    if backend != "nccl":
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    return device


def rank_main(job_path: Path) -> int:
    """A rank started by torchrun: run the job's function, write (ok, value or traceback)."""
    import faulthandler

    import torch
    import torch.distributed as dist

    from conformance.world.context import RankContext
    from conformance.world.rank import execute_cell

    faulthandler.enable(all_threads=True)
    job: Job = pickle.loads(job_path.read_bytes())
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torchrun_device(job.backend)
    torch.set_num_threads(1)
    dist.init_process_group(process_group_backend(job.backend))
    ctx = RankContext(rank, size, job.backend, device, Path(job.cell_dir), job.seed)
    reply = execute_cell(job.fn, job.arg, ctx)  # a rank that raises tears its group down
    answer = (
        (True, reply.value, reply.finished_at, "")
        if reply.ok
        else (False, reply.error, reply.finished_at, reply.raised_in)
    )
    (job_path.parent / f"rank{rank}.pkl").write_bytes(pickle.dumps(answer))
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if reply.ok else 1


if __name__ == "__main__":
    sys.exit(rank_main(Path(sys.argv[1])))

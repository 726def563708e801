"""The world of a torchrun launch (conformance.launch) as a CellPool: torchrun's own processes,
one world, each rank running the cell function itself and setting its reply in torchrun's
store; how a cell ended there, in the pool's terms (CellRun)."""

from __future__ import annotations

import os
import pickle
import shutil
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from conformance.world.attribution import error_status
from conformance.world.cellrun import CellRun
from conformance.world.devices import process_group_backend
from conformance.world.rank import CellFn, execute_cell

GRACE_S = 30.0  # beyond the case timeout, how long ranks wait for each other's replies


class LaunchHang(Exception):
    """Some rank did not reply in time: the world must be restarted by torchrun."""


@dataclass
class LaunchWorld:
    """The CellPool of a launch: its one world, torchrun's processes. Each rank runs the cell
    function itself and sets its reply in torchrun's store; every rank reads them all, so
    every rank knows how the cell ended and whether the next needs a fresh group."""

    rank: int
    size: int
    backend: str
    device: Any  # torch.device
    scratch: Path  # checkpoints, shared by the ranks (by every node)
    store: Any  # torchrun's store: replies, and the rendezvous of fresh default groups
    tag: str  # this torchrun attempt: run id and restart count
    timeout_s: float
    root: Path = Path()  # this cell's directory (CellPool.root), set by begin()
    generation: int = 0
    calls: int = 0

    def begin(self, index: int) -> None:
        """Cell `index` starts: its directory, and the one of two cells back removed (every
        rank has answered the cell after it, so none reads it any more)."""
        if self.rank == 0:
            shutil.rmtree(self.scratch / self.tag / f"cell{index - 2}", ignore_errors=True)
        self.root = self.scratch / self.tag / f"cell{index}"
        self.root.mkdir(parents=True, exist_ok=True)

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
        if size != self.size:
            return CellRun(
                "skip",
                detail=f"needs {size} ranks, this torchrun launch has {self.size} "
                f"(run it with --nproc-per-node {size}, or under pytest)",
            )
        if slot:
            return CellRun(
                "skip",
                detail=f"needs a second world of {size} ranks that never ran the first phase; a "
                "torchrun launch is one world (run it under pytest)",
            )
        from conformance.world import RankContext

        self.calls += 1
        cell_dir = self.root / f"run{self.calls}"
        cell_dir.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        reply = execute_cell(fn, arg, RankContext(self.rank, self.size, backend, self.device, cell_dir, seed))
        try:
            payload = pickle.dumps(
                (reply.ok, reply.value if reply.ok else reply.error, reply.finished_at, reply.raised_in)
            )
        except Exception as exc:
            payload = pickle.dumps((False, f"cell value could not be sent: {exc!r}", reply.finished_at, ""))
        prefix = f"conformance/{self.tag}/run{self.calls}"
        self.store.set(f"{prefix}/rank{self.rank}", payload)
        replies = self._gather(prefix, timeout_s + GRACE_S)
        duration = time.monotonic() - start
        if len(replies) < self.size:
            missing = sorted(set(range(self.size)) - set(replies))
            raise LaunchHang(
                f"rank(s) {missing} did not answer within {timeout_s + GRACE_S:.0f} s "
                f"(--case-timeout {timeout_s:.0f} s and {GRACE_S:.0f} s of grace); torchrun restarts the world"
            )
        failed = sorted(
            (finished, r, text, raised) for r, (ok, text, finished, raised) in replies.items() if not ok
        )
        if failed:
            self.fresh_group()
            detail = "\n".join(f"rank {r}: {text}" for _, r, text, _ in failed)  # the first to fail leads
            status = error_status(failed[0][3])
            return CellRun(status, detail=detail, duration_s=duration, raised_in=failed[0][3])
        return CellRun("ok", values=[replies[r][1] for r in range(self.size)], duration_s=duration)

    def _gather(self, prefix: str, wait_s: float) -> dict[int, tuple[bool, Any, float, str]]:
        deadline = time.monotonic() + wait_s
        replies: dict[int, tuple[bool, Any, float, str]] = {}
        while True:
            for r in range(self.size):
                key = f"{prefix}/rank{r}"
                if r not in replies and self.store.check([key]):
                    replies[r] = pickle.loads(self.store.get(key))
            if len(replies) == self.size or time.monotonic() > deadline:
                return replies
            time.sleep(0.01)

    def fresh_group(self) -> None:
        """The default group, anew after a cell in which some rank raised: a collective that
        cell left half done can never pair with one of the next."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self.generation += 1
        dist.init_process_group(
            process_group_backend(self.backend),
            store=dist.PrefixStore(f"conformance/{self.tag}/pg{self.generation}", self.store),
            rank=self.rank,
            world_size=self.size,
            timeout=timedelta(seconds=self.timeout_s),
        )


def torchrun_store(rank: int, size: int) -> Any:
    """A client of torchrun's store (the agent's, or rank 0's), as init_process_group's env://
    makes one. Every group of the launch rendezvouses under a prefix of its own attempt: a
    restarted world that ran a plain init_process_group would read the dead attempt's keys
    from the same store and try to connect to its peers (gloo: "connectFullMesh failed ...
    Connection refused", torch 2.13)."""
    import torch.distributed as dist

    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    return dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        size,
        is_master=not agent and rank == 0,
        timeout=timedelta(seconds=300),
        multi_tenant=not agent,
    )

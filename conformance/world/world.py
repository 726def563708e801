"""A world: N rank processes of one backend that serve many cells, and say how each ended.

The parent sends a cell to every rank and waits on every rank's socket at once, so that
whichever happens first is seen: all replies (ok or error), a rank dying (its socket reads
as end-of-file: crash), or the timeout (hang). After a crash or a hang the world is killed
whole and must not be used again; the pool starts a fresh one for the next cell.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from conformance.world.attribution import UNTRACED, error_status, trace_path, waiting_in
from conformance.world.cellrun import CellRun
from conformance.world.launcher import Launcher, RankArgs, RankProcess, SpawnLauncher
from conformance.world.rank import CELL_MARK, RELEASE, CellFn, CellMessage, RankReply, runs_in_one_process
from conformance.world.template import LaunchError
from conformance.world.wording import (
    UNTRACED_SAID,
    describe_exit,
    error_detail,
    last_line,
    place,
    tail,
    where,
)


class WorldStartError(RuntimeError):
    """The world's ranks could not be started or did not rendezvous in time."""


class World:
    def __init__(
        self,
        backend: str,
        size: int,
        root: Path | None = None,
        *,
        start_timeout_s: float = 120.0,
        error_grace_s: float = 3.0,
        release_wait_s: float = 3.0,
        preload: tuple[str, ...] = (),
        launcher: Launcher | None = None,
    ) -> None:
        """preload: modules every rank imports once, after its process group is up and before
        it is ready (the cells' usual imports: a cell then starts without them). launcher: how
        the ranks start (conformance.world.launcher); spawned when none is given (WorldPool
        gives a template's forks unless told to spawn)."""
        self.backend = backend
        self.launcher: Launcher = launcher or SpawnLauncher()
        self.preload = preload
        self.size = size
        self.start_timeout_s = start_timeout_s
        # how long the other ranks may take to end a cell (raise or return) after one raised: a
        # rank still inside it then waits for a peer that left (a collective), and a check
        # where the load must refuse counts it as a hang (conformance.check.phases)
        self.error_grace_s = error_grace_s
        self.release_wait_s = release_wait_s  # then how long a released rank may take to end
        self.dir = Path(tempfile.mkdtemp(prefix=f"world-{backend}-w{size}-", dir=root))
        self._procs: list[RankProcess] = []
        self._conns: list[Connection] = []
        self._cells = 0
        self._fresh_group = False
        self.alive = False

    # -- lifecycle -------------------------------------------------------------------------
    def log_path(self, rank: int) -> Path:
        return self.dir / f"rank{rank}.log"

    def start(self, pg_timeout_s: float = 300.0) -> World:
        store = self.dir / "filestore"
        try:
            for rank in range(self.size):
                ours, theirs = socket.socketpair()
                args = RankArgs(rank, self.size, self.backend, store, self.log_path(rank), pg_timeout_s)
                try:
                    self._procs.append(self.launcher.start(args, Connection(theirs.detach())))
                except LaunchError as exc:
                    raise WorldStartError(
                        f"rank {rank} of the {self.backend} world could not start: {exc}"
                    ) from None
                conn = Connection(ours.detach())
                self._conns.append(conn)
                conn.send((list(sys.path), list(self.preload)))
            self._await_ready()
        except BaseException:
            self.kill()
            raise
        self.alive = True
        return self

    def _await_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        pending = dict(enumerate(self._conns))
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorldStartError(
                    f"{self.backend} world of {self.size} ranks did not rendezvous within "
                    f"{self.start_timeout_s:.0f} s; ranks {sorted(pending)} never became ready"
                    + self._logs_since({r: 0 for r in pending})
                )
            for obj in wait(list(pending.values()), timeout=left):
                rank = self._conns.index(obj)  # type: ignore[arg-type]
                try:
                    obj.recv()  # type: ignore[union-attr]
                except (EOFError, OSError):
                    self._reap(rank)
                    raise WorldStartError(
                        f"rank {rank} {describe_exit(self._procs[rank].returncode)} while the "
                        f"{self.backend} world of {self.size} ranks was starting"
                        + self._logs_since({rank: 0})
                    ) from None
                del pending[rank]

    def _reap(self, rank: int, timeout_s: float = 5.0) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._procs[rank].wait(timeout_s)

    def close(self) -> None:
        """Stop the ranks politely, then make sure: no process of this world is left."""
        if self.alive:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.send(None)
            for rank in range(len(self._procs)):
                self._reap(rank)
        self.kill()

    def kill(self) -> None:
        for proc in self._procs:
            for killer in (os.killpg, os.kill):
                try:
                    killer(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError, OSError):
                    continue
        for rank in range(len(self._procs)):
            self._reap(rank, 10)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        self.alive = False
        shutil.rmtree(self.dir, ignore_errors=True)

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    @property
    def cells_run(self) -> int:
        """How many cells this world has been sent so far."""
        return self._cells

    # -- running a cell --------------------------------------------------------------------
    def run(self, fn: CellFn, arg: Any, *, timeout_s: float, seed: int = 0) -> CellRun:
        if not self.alive:
            raise RuntimeError("this world was discarded; ask the pool for a fresh one")
        if getattr(fn, "__module__", None) == "__main__":
            raise ValueError(
                f"cell function {getattr(fn, '__qualname__', fn)!r} is defined in __main__; ranks "
                "import cell functions by module name, so define it in an importable module"
            )
        self._cells += 1
        cell_dir = self.dir / f"cell{self._cells}"
        cell_dir.mkdir()
        offsets = {r: self._log_size(r) for r in range(self.size)}
        alone = runs_in_one_process(fn)
        if alone and self.size != 1:
            raise ValueError(f"{getattr(fn, '__qualname__', fn)!r} runs in one process: a world of 1 rank")
        message = CellMessage(fn, arg, str(cell_dir), seed, self._fresh_group, alone)
        t0 = time.monotonic()
        try:
            for conn in self._conns:
                conn.send_bytes(pickle.dumps(message))
        except OSError:
            pass  # a dead rank: its socket reads as EOF below, a crash
        run, unfinished = self._collect(t0, timeout_s, offsets, cell_dir)
        run = dataclasses.replace(run, duration_s=time.monotonic() - t0)
        if run.status == "crash" and message.fresh_group and not self._cell_began(offsets):
            run = dataclasses.replace(run, before_cell=True)
        self._fresh_group = run.status != "ok" or alone
        if run.status in ("crash", "hang") or unfinished:
            self.kill()  # a rank still inside the cell would pair its collectives with the next
        else:
            shutil.rmtree(cell_dir, ignore_errors=True)
        return run

    def _collect(
        self, t0: float, timeout_s: float, offsets: dict[int, int], cell_dir: Path
    ) -> tuple[CellRun, bool]:
        """How the cell ended, and whether some rank is still inside it."""
        replies: dict[int, RankReply] = {}
        deadline = t0 + timeout_s
        first_error_at: float | None = None
        while len(replies) < self.size:
            limit = deadline if first_error_at is None else min(deadline, first_error_at + self.error_grace_s)
            left = limit - time.monotonic()
            if left <= 0:
                break
            pending = [c for r, c in enumerate(self._conns) if r not in replies]
            for obj in wait(pending, timeout=left):  # a dead rank's socket reads as EOF
                rank = self._conns.index(obj)  # type: ignore[arg-type]
                try:
                    reply = pickle.loads(obj.recv_bytes())  # type: ignore[union-attr]
                except (EOFError, OSError):
                    return self._crash(rank, offsets, cell_dir), True
                replies[rank] = reply
                if not reply.ok and first_error_at is None:
                    first_error_at = time.monotonic()
        # A rank may have died right after replying, or while another rank errored.
        dead = [r for r, p in enumerate(self._procs) if p.poll() is not None]
        if dead:
            return self._crash(dead[0], offsets, cell_dir), True
        errors = sorted((r for r in replies.values() if not r.ok), key=lambda r: r.finished_at)
        missing = [r for r in range(self.size) if r not in replies]
        if errors:
            status = error_status(errors[0].raised_in)
            waiting = tuple((r, waiting_in(trace_path(cell_dir, r))) for r in missing)
            stacks = self._dump_stacks([r for r, _ in waiting], offsets) if waiting else ""
            detail = error_detail(errors, waiting, self.error_grace_s, stacks)
            still = waiting
            if missing:
                detail += self._release(replies, missing)
                still = self._still_inside(waiting, replies, cell_dir)
                inside = dict(still)  # rank -> the call it is in now ("": the harness's own code)
                ended = [r for r, _ in waiting if not inside.get(r)]
                if ended:  # the grace's "waiting in a collective?" was a guess: they were slow
                    detail += f"\n--- ranks {ended} then ended the call: slow, not waiting on the others"
            if any(call == UNTRACED for _, call in (*waiting, *still)):
                # whether a rank waits in the code under test or in the harness is not known,
                # when the grace ended or after the release: neither a refusal nor a hang of the
                # strategy (a fault of this suite's trace)
                status, detail = "harness-error", f"{UNTRACED_SAID}\n{detail}"
            run = CellRun(status, detail=detail, raised_in=errors[0].raised_in, unfinished=still)
            return run, len(replies) < self.size
        if missing:
            return CellRun(
                "hang",
                detail=f"timed out after {timeout_s:g} s; ranks {missing} did not finish "
                f"(ranks {sorted(replies)} did). Stacks of every unfinished rank:"
                + self._dump_stacks(missing, offsets),
            ), True
        return CellRun("ok", values=[replies[r].value for r in range(self.size)]), False

    def _still_inside(
        self, waiting: tuple[tuple[int, str], ...], replies: dict[int, RankReply], cell_dir: Path
    ) -> tuple[tuple[int, str], ...]:
        """Of the ranks that were inside a call when the grace ended, those that never ended it:
        one that returned once the others let go of the group was slow, not waiting on them (a
        collective with a rank that left cannot succeed), and one still out is where its trace
        says now (a slow rank that left the call and waits in the harness ended it). One that
        raised inside a call under test after the release stays (its collective failed because
        the others left); one that raised in the harness's own code had left the call."""
        out = []
        for rank, call in waiting:
            if rank in replies:
                if not replies[rank].ok and replies[rank].raised_in:
                    out.append((rank, call))
            else:
                out.append((rank, waiting_in(trace_path(cell_dir, rank))))
        return tuple(out)

    def _release(self, replies: dict[int, RankReply], missing: list[int]) -> str:
        """Tell the ranks that ended the cell to let go of their default group, so that the
        `missing` ranks' collectives with them fail, and wait a moment for those to end (added
        to `replies`); what they said, for the detail. A rank still inside then is killed with
        the world."""
        for rank in replies:
            with contextlib.suppress(OSError):
                self._conns[rank].send_bytes(pickle.dumps(RELEASE))
        deadline = time.monotonic() + self.release_wait_s
        late: list[str] = []
        while missing and (left := deadline - time.monotonic()) > 0:
            pending = [self._conns[r] for r in missing]
            for obj in wait(pending, timeout=left):
                rank = self._conns.index(obj)  # type: ignore[arg-type]
                missing.remove(rank)
                try:
                    reply = pickle.loads(obj.recv_bytes())  # type: ignore[union-attr]
                except (EOFError, OSError):
                    continue  # died: the world is killed below
                replies[rank] = reply
                ended = "returned" if reply.ok else f"raised {reply.error_type}{where(reply)}"
                late.append(f"rank {rank} {ended}" + ("" if reply.ok else f": {last_line(reply.error)}"))
        if not late:
            return ""
        return "\n--- once the other ranks let go of the group: " + "; ".join(late)

    def _crash(self, rank: int, offsets: dict[int, int], cell_dir: Path) -> CellRun:
        """A rank died: how, in which call under test (its trace), and its output."""
        self._reap(rank)
        others = [
            f"rank {r} {describe_exit(p.returncode)}"
            for r, p in enumerate(self._procs)
            if r != rank and p.poll() not in (None, 0)
        ]
        call = place(waiting_in(trace_path(cell_dir, rank)))
        detail = f"rank {rank} {describe_exit(self._procs[rank].returncode)} (in {call})"
        if others:
            detail += "; also " + ", ".join(others)
        return CellRun("crash", detail=detail + self._logs_since({rank: offsets[rank]}))

    def _cell_began(self, offsets: dict[int, int]) -> bool:
        """Whether every rank got past re-creating its process group into the cell (each prints
        "--- cell in" as the cell begins: conformance.world.rank)."""
        for rank in range(self.size):
            try:
                with open(self.log_path(rank), errors="replace") as f:
                    f.seek(offsets[rank])
                    if CELL_MARK not in f.read():
                        return False
            except FileNotFoundError:
                return False
        return True

    # -- logs --------------------------------------------------------------------------------
    def _log_size(self, rank: int) -> int:
        try:
            return self.log_path(rank).stat().st_size
        except FileNotFoundError:
            return 0

    def _logs_since(self, offsets: dict[int, int]) -> str:
        out = []
        for rank, offset in sorted(offsets.items()):
            try:
                with open(self.log_path(rank), errors="replace") as f:
                    f.seek(offset)
                    text = f.read().strip()
            except FileNotFoundError:
                text = ""
            if text:
                out.append(f"\n--- rank {rank} output:\n{tail(text)}")
        return "".join(out)

    def _dump_stacks(self, ranks: list[int], offsets: dict[int, int]) -> str:
        for rank in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._procs[rank].pid, signal.SIGUSR1)
        time.sleep(1.0)  # faulthandler writes from its signal handler; give it a moment
        return self._logs_since({r: offsets[r] for r in ranks})

"""A template process for forked ranks: it imports torch and the cells' usual modules, then
forks a rank whenever a world asks, and reports each rank's exit code.

Nothing else happens in it: no process group, no tensor op, no cell, no thread of ours. Each
rank forked from it starts where a newly spawned rank stands after its imports, in a fraction
of a second instead of the seconds `import torch` takes.

The protocol, over a SOCK_SEQPACKET socket pair (one message each way per rank): the world
sends the pickled (RankArgs, environment) with the rank's socket as a passed file descriptor
(the import path comes over that socket, as to a spawned rank); the template answers with
the child's pid and passes the read end of a pipe on which it writes the child's exit code
when it reaps it (as subprocess reports it: negative for a signal).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

_INT = struct.Struct("i")
KILLED_WITH_TEMPLATE = -int(signal.SIGKILL)  # a rank's death signal when its template dies


class LaunchError(RuntimeError):
    """The template process could not start, or died."""


@dataclass(frozen=True)
class RankArgs:
    """What a rank needs to start: who it is, where the world meets, where its output goes."""

    rank: int
    size: int
    backend: str
    store: Path
    log: Path
    pg_timeout_s: float


# -- the world's side ------------------------------------------------------------------------
class ForkedRank:
    """A rank forked by the template; the face of subprocess.Popen the world uses."""

    def __init__(self, pid: int, status_fd: int) -> None:
        self.pid = pid
        self._status_fd = status_fd
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        return self._code

    def poll(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.wait(0)
        return None

    def wait(self, timeout: float | None = None) -> int:
        if self._code is None:
            readable, _, _ = select.select([self._status_fd], [], [], timeout)
            if not readable:
                raise subprocess.TimeoutExpired(f"rank process {self.pid}", timeout or 0.0)
            data = os.read(self._status_fd, _INT.size)
            self._code = _INT.unpack(data)[0] if len(data) == _INT.size else KILLED_WITH_TEMPLATE
            os.close(self._status_fd)
        return self._code


class Template:
    """The template process, seen from the world's process."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket, log: Path) -> None:
        self._proc, self._sock, self._log = proc, sock, log

    @classmethod
    def start(cls, modules: tuple[str, ...], env: dict[str, str], log: Path, timeout_s: float) -> Template:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "conformance._rank_entry", str(os.getpid()), "--template",
                 str(theirs.fileno()), *modules],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),), start_new_session=True, env=env,
            )  # fmt: skip
        theirs.close()
        ours.settimeout(timeout_s)
        template = cls(proc, ours, log)
        try:
            if ours.recv(16) != b"ready":
                raise LaunchError("the template process ended while importing" + template._tail())
        except (OSError, LaunchError) as exc:
            template.close()
            if isinstance(exc, LaunchError):
                raise
            raise LaunchError(f"the template process did not start: {exc!r}" + template._tail()) from None
        return template

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def fork(self, args: RankArgs, conn: Connection, env: dict[str, str]) -> ForkedRank:
        try:
            socket.send_fds(self._sock, [pickle.dumps((args, env))], [conn.fileno()])
            reply, fds, _, _ = socket.recv_fds(self._sock, _INT.size, 1)
        except OSError as exc:
            raise LaunchError(
                f"the template process did not fork rank {args.rank}: {exc!r}" + self._tail()
            ) from None
        if len(reply) != _INT.size or len(fds) != 1:
            raise LaunchError(f"the template process ended before forking rank {args.rank}" + self._tail())
        return ForkedRank(_INT.unpack(reply)[0], fds[0])

    def close(self) -> None:
        """The template ends when its socket closes; the ranks it forked die with it."""
        self._sock.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            text = self._log.read_text(errors="replace").strip()
            if text:
                return "\n--- template output:\n" + text[-3000:]
        return ""


# -- the template's side ---------------------------------------------------------------------
def serve(control_fd: int, modules: list[str]) -> None:
    """The template's loop (conformance._rank_entry --template): import, then fork on request
    and reap, until the world's process closes its socket (or dies: then this process gets
    SIGKILL, and its ranks with it)."""
    control = socket.socket(fileno=control_fd)
    for module in modules:
        _import(module)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the world's process owns interrupts
    children: dict[int, int] = {}  # pid -> write end of its status pipe
    template_pid = os.getpid()
    control.send(b"ready")
    while True:
        readable, _, _ = select.select([control, wake_r], [], [])
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            _reap(children)
        if control in readable:
            message, fds, _, _ = socket.recv_fds(control, 1 << 20, 1)
            if not message:
                return
            status_r, status_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    for fd in (control_fd, wake_r, wake_w, status_r, status_w, *children.values()):
                        os.close(fd)
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    _run_rank(pickle.loads(message), fds[0], template_pid)
                    code = 0
                except BaseException:
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    os._exit(code)
            children[pid] = status_w
            os.close(fds[0])
            socket.send_fds(control, [_INT.pack(pid)], [status_r])
            os.close(status_r)
            _reap(children)


OPTIONAL = "?"  # leads a module the template imports if it can (template_modules' `warm`)


def _import(module: str) -> None:
    """Import a module; one led by OPTIONAL only if it imports (what it raised goes to the
    template's log, and a cell that needs the module imports it itself and says why it cannot)."""
    if not module.startswith(OPTIONAL):
        importlib.import_module(module)
        return
    try:
        importlib.import_module(module.removeprefix(OPTIONAL))
    except Exception:
        traceback.print_exc()


def _reap(children: dict[int, int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status_w = children.pop(pid, None)
        if status_w is not None:
            with contextlib.suppress(OSError):
                os.write(status_w, _INT.pack(os.waitstatus_to_exitcode(status)))
            os.close(status_w)


def _run_rank(request: tuple[RankArgs, dict[str, str]], fd: int, template_pid: int) -> None:
    """A forked rank's first steps: a session of its own (the world kills its process group),
    death with the template (exit now if it is already gone), output to its log file, the
    world's environment; then the rank's loop, which takes the world's import path first."""
    from conformance.lifetime import die_with_parent
    from conformance.world.rank import rank_main

    args, env = request
    os.setsid()
    die_with_parent(template_pid)
    log = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(env)
    rank_main(args.rank, args.size, args.backend, str(args.store), Connection(fd), args.pg_timeout_s)

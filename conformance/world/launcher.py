"""How a world's rank processes come to be: `RankArgs` in, a process handle out.

`spawn`: each rank is a new interpreter (`python -m conformance._rank_entry`), which imports
torch: about 2.5 s a rank on these machines.

`fork`: each rank is forked from a template process that has imported torch and the cells'
usual modules and done nothing else: no process group, no tensor op, no cell
(conformance.world.template). A forked rank starts in a
fraction of a second and shares nothing with any other world, which is what
`--fresh-worlds` needs to be affordable. PyTorch's own distributed tests fork their ranks
from a process that has imported torch, too.

Both give the world a handle with the same face as subprocess.Popen's: pid, poll(),
returncode, wait(timeout).
"""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Protocol

from conformance.world.template import OPTIONAL, RankArgs, Template


class RankProcess(Protocol):
    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class Launcher(Protocol):
    """Starts one rank; `conn` is the rank's end of its socket to the world (the launcher
    closes this process's copy)."""

    def start(self, args: RankArgs, conn: Connection) -> RankProcess: ...

    def close(self) -> None: ...


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


class SpawnLauncher:
    def start(self, args: RankArgs, conn: Connection) -> RankProcess:
        fd = conn.fileno()
        try:
            with open(args.log, "ab") as log:
                return subprocess.Popen(
                    [sys.executable, "-u", "-m", "conformance._rank_entry", str(os.getpid()), str(args.rank),
                     str(args.size), args.backend, str(args.store), str(fd), str(args.pg_timeout_s)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(fd,), start_new_session=True, env=_env(),
                )  # fmt: skip
        finally:
            conn.close()

    def close(self) -> None:
        pass


class ForkLauncher:
    """Ranks forked from a template process (conformance.world.template) that this launcher
    starts on its first rank and keeps until `close`."""

    def __init__(
        self,
        root: Path,
        preload: tuple[str, ...] = (),
        *,
        warm: tuple[str, ...] = (),
        start_timeout_s: float = 120.0,
    ) -> None:
        """root: where the template's output goes (template.log). warm: modules the template
        imports if it can (a framework's: template_modules)."""
        self.modules = template_modules(preload, warm)
        self.log = root / "template.log"
        self.start_timeout_s = start_timeout_s
        self._template: Template | None = None

    def start(self, args: RankArgs, conn: Connection) -> RankProcess:
        try:
            if self._template is None or not self._template.alive():
                self._template = Template.start(self.modules, _env(), self.log, self.start_timeout_s)
            return self._template.fork(args, conn, _env())
        finally:
            conn.close()

    @property
    def template_pid(self) -> int | None:
        """The template process's pid while it runs."""
        return self._template.pid if self._template is not None and self._template.alive() else None

    def close(self) -> None:
        if self._template is not None:
            self._template.close()
            self._template = None


def template_modules(
    preload: tuple[str, ...], warm: tuple[str, ...] = (), *, cuda_build: bool | None = None
) -> tuple[str, ...]:
    """What the template process imports: torch, the rank's loop, the cells' usual modules,
    then, if it can, the `warm` ones (the frameworks a run's cells import: every rank forked
    after has them, a world restarted after a crash included), on a CPU build of torch only.
    A framework may initialise CUDA as it is imported (torchtitan's checkpoint module and
    DeepSpeed's accelerator detection do, on a CUDA build), after which no rank forked from the
    template can use CUDA ("Cannot re-initialize CUDA in forked subprocess"): a fault of this
    harness that would read as the cells' errors. cuda_build: torch's (None: ask torch)."""
    if cuda_build is None:
        import torch

        cuda_build = torch.backends.cuda.is_built()
    base = ("torch", "torch.distributed", "conformance.world.rank", "conformance.world.context", *preload)
    return base if cuda_build else (*base, *(OPTIONAL + m for m in warm))

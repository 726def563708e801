"""A process's life tied to its parent's: ranks, the template process that forks them, and
xdist workers. The standard library only, so that it costs nothing before the slow imports."""

import contextlib
import ctypes
import os
import signal
import sys


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """This process gets `sig` when its parent dies (Linux); it exits now when the parent
    is already gone. Used by ranks (SIGKILL) and by xdist workers (SIGTERM: a worker whose
    controller was killed ends, and its ranks with it)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before the prctl above
        os._exit(1)

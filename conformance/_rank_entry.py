"""Entry of a rank process, `python -m conformance._rank_entry PARENT_PID RANK SIZE ...`, or of
the template process that forks them (conformance.world.template), `... PARENT_PID --template`.

Outside the `conformance.world` package on purpose: importing that package imports torch
(seconds), and the rank must ask to die with its parent before anything slow happens, or a
parent killed meanwhile leaves it orphaned.
"""

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


if __name__ == "__main__":
    die_with_parent(int(sys.argv[1]))
    if sys.argv[2] == "--template":  # PARENT_PID --template FD MODULE...: forks ranks on request
        from conformance.world.template import serve

        serve(int(sys.argv[3]), sys.argv[4:])
    else:
        from conformance.world.rank import main

        main(sys.argv[2:])

"""Entry of a rank process, `python -m conformance._rank_entry PARENT_PID RANK SIZE ...`, or of
the template process that forks them (conformance.world.template), `... PARENT_PID --template`.

Outside the `conformance.world` package on purpose: importing that package imports torch
(seconds), and the rank must ask to die with its parent (conformance.lifetime) before anything
slow happens, or a parent killed meanwhile leaves it orphaned.
"""

import sys

from conformance.lifetime import die_with_parent

if __name__ == "__main__":
    die_with_parent(int(sys.argv[1]))
    if sys.argv[2] == "--template":  # PARENT_PID --template FD MODULE...: forks ranks on request
        from conformance.world.template import serve

        serve(int(sys.argv[3]), sys.argv[4:])
    else:
        from conformance.world.rank import main

        main(sys.argv[2:])

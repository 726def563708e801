"""How a world words a cell's end: whose code raised, how a rank exited, where the ranks that
never ended it were, and the detail of an error cell. Text only: the world decides the outcome."""

from __future__ import annotations

import signal

from conformance.world.attribution import UNTRACED
from conformance.world.rank import RankReply

LOG_TAIL_CHARS = 4000


HARNESS_CODE = "the harness's own code"
UNTRACED_SAID = "a rank's trace of its calls under test could not be written: where it waits is not known"


def place(call: str) -> str:
    return {"": HARNESS_CODE, UNTRACED: "an unknown place (its trace could not be written)"}.get(call, call)


def where(reply: RankReply) -> str:
    """Whose code raised, for the first line of an error: the call under test, or the harness."""
    return f" in {reply.raised_in}" if reply.under_test else " in the harness's own code"


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name} (exit code {exitcode})"
    return f"exited with code {exitcode}"


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")[:300]


def tail(text: str, limit: int = LOG_TAIL_CHARS) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def error_detail(
    errors: list[RankReply], waiting: tuple[tuple[int, str], ...], grace_s: float, stacks: str
) -> str:
    """An error cell's detail: the first error in full, the others' tails, then the ranks that
    did not end the cell within `grace_s` of it, where each was, and their `stacks`."""
    first, rest = errors[0], errors[1:]
    lines = [f"rank {first.rank} raised {first.error_type} first{where(first)}:", first.error.rstrip()]
    for other in rest:
        lines += [
            f"--- then rank {other.rank} raised {other.error_type}{where(other)}:",
            tail(other.error.rstrip(), 1500),
        ]
    text = "\n".join(lines)
    if waiting:
        missing = [r for r, _ in waiting]
        places = ", ".join(f"rank {r} in {place(call)}" for r, call in waiting)
        text += (
            f"\n--- ranks {missing} did not finish within {grace_s:g} s after the error "
            f"({places}; waiting in a collective?); their stacks:" + stacks
        )
    return text

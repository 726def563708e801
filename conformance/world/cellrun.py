"""How a cell ended in a world: the record every world kind (spawned, forked, torchrun) returns,
and the detail of a cell the pool ran again."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CellRun:
    """How a cell ended in the world. status: ok | error (the code under test raised first) |
    harness-error (the harness's own code raised first, or the world could not start) | crash
    | hang, or skip when the pool cannot be that world (a torchrun launch of another size)."""

    status: str
    values: list[Any] = field(default_factory=list)  # one per rank, when ok
    detail: str = ""
    duration_s: float = 0.0
    note: str = ""  # one line: how the pool came by this run (a rerun in a fresh world)
    raised_in: str = ""  # error: the call under test the first error escaped from
    # error: the ranks that had not ended the cell (raised or returned) within the world's grace
    # after the first error, each with the call under test it was inside ("" for the harness's
    # own code): waiting, as a rank left alone in a collective waits
    unfinished: tuple[tuple[int, str], ...] = ()
    first_run: str = ""  # the detail of the run this one replaced, kept whole
    # crash: the rank died re-creating the warm world's process group, before the cell began
    # (a fault of the world, which the pool answers with a fresh world, never the cell's)
    before_cell: bool = False

    def described(self, detail: str) -> str:
        """A cell's detail, led by the pool's note, the replaced run's detail at the end."""
        return with_reruns(detail, [("", self)])


def with_reruns(detail: str, runs: list[tuple[str, CellRun]]) -> str:
    """`detail` led by the note of each (label, run) the pool ran again (a hang in a warm world,
    conformance.world.pool), the replaced runs' details at the end; runs without a note add
    nothing. label: what leads that run's lines, e.g. "[save phase] " in a multi-phase check."""
    reruns = [(label, run) for label, run in runs if run.note]
    if not reruns:
        return detail
    notes = [f"{label}{run.note}" for label, run in reruns]
    firsts = [f"--- {label}the first run, in the warm world:\n{run.first_run}" for label, run in reruns]
    return "\n".join([*notes, detail, *firsts])

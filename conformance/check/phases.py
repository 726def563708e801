"""Checks that take more than one cell: phases run one after another in worlds of the pool.

A check (resume, reshard, interop, corrupt) runs a phase per world (save in N ranks, load in
M ranks, ...), passing values from one phase to the next through its argument. A phase that
does not end ok ends the check with that outcome, its detail led by the phase's name.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.observed import Observed, from_detail
from conformance.outcome import Outcome
from conformance.world import CellPool, CellRun, with_reruns
from conformance.world.rank import CellFn

STATUS_OUTCOMES = {
    "error": Outcome.ERROR,
    "harness-error": Outcome.HARNESS_ERROR,
    "crash": Outcome.CRASH,
    "hang": Outcome.HANG,
    "skip": Outcome.SKIP,
}


class PhaseError(Exception):
    """A phase ended with an error, harness error, crash or hang; `detail` is the world's, led
    by the phase."""

    def __init__(self, outcome: Outcome, phase: str, detail: str, raised_in: str = "") -> None:
        super().__init__(f"[{phase}] {detail}")
        self.outcome, self.phase, self.detail = outcome, phase, f"[{phase}] {detail}"
        self.raised_in = raised_in  # an error: the call under test it escaped from

    def raised_by(self, *calls: str) -> bool:
        """Whether the phase ended in an error of the code under test, in one of `calls`."""
        return self.outcome is Outcome.ERROR and self.raised_in in calls


def observed_of(*phases: list[dict[str, Any]]) -> list[Observed]:
    """Every record the ranks of some phases returned (their values' "observed")."""
    return [o for values in phases for value in values for o in value.get("observed", ())]


@dataclass
class Phases:
    pool: CellPool
    backend: str
    timeout_s: float
    seed: int
    reruns: list[tuple[str, CellRun]] = field(default_factory=list)  # phases the pool ran again
    # every difference and error the check found, as records (conformance.observed): run() adds
    # a phase's error, crash or hang; the check adds what its ranks returned (observed_of)
    observed: list[Observed] = field(default_factory=list)

    def run(self, phase: str, size: int, fn: CellFn, arg: Any, *, other_world: bool = False) -> list[Any]:
        """Every rank's return value, or PhaseError. other_world: in the pool's second world of
        that size, whose processes never run a first phase (they never held its objects)."""
        slot = "other" if other_world else ""
        run = self.pool.run(self.backend, size, fn, arg, timeout_s=self.timeout_s, seed=self.seed, slot=slot)
        if run.status != "ok":
            self.observed += from_detail(run.status, run.detail, scope=f"{phase} phase")
            raise PhaseError(
                STATUS_OUTCOMES[run.status],
                f"{phase} phase, {size} ranks",
                run.described(run.detail),
                run.raised_in,
            )
        if run.note:
            self.reruns.append((phase, run))
        return run.values

    def described(self, detail: str) -> str:
        """The check's detail, led by the note of each phase the pool ran again (a hang in a
        warm world, see conformance.world.pool), their first runs at the end."""
        return with_reruns(
            detail, [(f"[{phase} phase] " if phase else "", run) for phase, run in self.reruns]
        )

    def scratch(self) -> Path:
        """Where a checkpoint between phases goes: a path that does not exist yet (the strategy
        writes a file or a directory there, as in the round trip), in a fresh directory every
        world of the pool can reach."""
        return Path(tempfile.mkdtemp(prefix="checkpoint-", dir=self.pool.root)) / "checkpoint"

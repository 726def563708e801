"""The result of one cell: an outcome word, a detail a person can act on, and a duration."""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass
from typing import Any

from conformance.observed import Observed, from_detail, from_fail_detail


class Outcome(str, enum.Enum):
    PASS = "pass"  # ran, and every compared value was bitwise equal
    FAIL = "fail"  # ran, and the check found a difference
    ERROR = "error"  # the code under test raised on some rank (the originating rank's traceback first)
    # the harness's own code raised (training, reading or comparing the state, the world's
    # plumbing): a fault of this suite, never the strategy's outcome; fails every run
    HARNESS_ERROR = "harness-error"
    CRASH = "crash"  # a rank died: a signal or a non-zero exit
    HANG = "hang"  # the cell outran its timeout; every rank's stack is in the detail
    SKIP = "skip"  # cannot run in this environment (GPUs, ranks, API missing), with reason
    UNSUPPORTED = "unsupported"  # not supported by design, with reason; never a pass

    def __str__(self) -> str:
        return self.value


# What the reports say of a cell that hung in a warm world and ran again in a fresh one
# (conformance.world.pool; CellResult.rerun). Results written before that field existed said
# it only in the first line of the detail, which is how they are read.
RERUN_NOTE = "hung in a warm world"

# The outcomes that fail a run unless a baseline expects them.
FAILING: frozenset[Outcome] = frozenset(
    {Outcome.FAIL, Outcome.ERROR, Outcome.CRASH, Outcome.HANG, Outcome.HARNESS_ERROR}
)
# The outcomes that fail a run whatever a baseline says: they are not the strategy's.
NEVER_EXPECTED: frozenset[Outcome] = frozenset({Outcome.HARNESS_ERROR})


@dataclass(frozen=True)
class CellResult:
    """What one cell produced. Only built-in types, so it travels on an xdist report."""

    id: str
    axes: dict[str, Any]
    outcome: Outcome
    detail: str
    duration_s: float
    # the pool ran it (a property: some example) again in a fresh world after a hang in a warm one
    rerun: bool = False
    # a failing cell's differences and errors, one record each (conformance.observed.Observed
    # as JSON); empty for a pass, a skip, and results written before the records existed
    observed: tuple[dict[str, Any], ...] = ()

    @property
    def records(self) -> list[Observed]:
        """What the cell observed, one record each. A failing cell of an older results.json (no
        records) has them read from its detail (conformance.observed.from_fail_detail,
        from_detail)."""
        if self.observed:
            return [Observed.from_json(o) for o in self.observed]
        if self.outcome is Outcome.FAIL:
            return from_fail_detail(self.detail)
        if self.outcome in FAILING - NEVER_EXPECTED:
            return from_detail(self.outcome.value, self.detail)
        return []

    @property
    def hung_in_a_warm_world(self) -> bool:
        return self.rerun

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["outcome"] = self.outcome.value
        out["duration_s"] = round(self.duration_s, 3)
        out["observed"] = list(self.observed)
        if not self.observed:
            del out["observed"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellResult:
        return cls(
            id=data["id"],
            axes=dict(data["axes"]),
            outcome=Outcome(data["outcome"]),
            detail=data["detail"],
            duration_s=float(data["duration_s"]),
            rerun=bool(data.get("rerun", RERUN_NOTE in str(data["detail"]).partition("\n")[0])),
            observed=tuple(data.get("observed", ())),
        )


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")


def first_line(detail: str) -> str:
    """The line of a detail a person reads first: the exception of the originating rank, the
    first difference of a fail, or the crash's cause."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    if not lines:
        return ""
    head, phase = lines[0], ""
    if head.startswith("[") and "] " in head:  # a phase of a multi-phase check: "[load phase, 2 ranks] ..."
        phase, head = head.split("] ", 1)
        phase += "] "
    if head.startswith("rank ") and " raised " in head:
        # The last exception line of the originating rank's block: for a plain traceback the
        # exception itself, for a wrapper (DCP's CheckpointException) the error it carries.
        found = None
        for line in lines[1:]:
            if line.startswith("--- "):
                break
            if _EXCEPTION_LINE.match(line):
                found = line
        if found:
            return f"{phase}{head.split(' raised ')[0]}: {found}"[:240]
    if head.endswith(":") and "differences" in head and len(lines) > 1:
        return f"{phase}{head} {lines[1]}"[:240]
    return f"{phase}{head}"[:240]

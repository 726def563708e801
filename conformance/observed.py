"""What a cell observed, as data: every difference the comparer found and every error, crash or
hang, one record each (results.json's `observed`), so that findings explain them one by one, the
gate sees a new one inside a known failure, and the tables say how bad the worst one is.

A difference's scope says where it was seen: the gathered full state, a rank's local state, the
live state a save changed, the resumed trajectory, the state loaded in another world, or a
check's own verdict (sanity, hygiene, a damaged checkpoint that loaded). Its kind says what
differs. Impact is derived from the kind alone (`IMPACT_OF_KIND`); a finding that explains a
record may say it is worse, never milder (conformance.findings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# The fixed scale of how bad a "no" is, worst first.
IMPACTS: dict[str, str] = {
    "corrupts": "a tensor's values, dtype or shape (or a saved value) silently differ",
    "loses": "state silently missing: a key, a param group, a scheduler",
    "drifts": "every tensor bit-exact; a Python type or container differs",
    "diverges": "the checkpoint holds the state exactly; the resumed run's arithmetic differs from the "
    "uninterrupted run's in the last bits (a reduction order, not the checkpoint)",
    "refuses": "the strategy raises: loud, nothing loaded",
    "crashes": "a rank dies",
    "hangs": "a rank never finishes",
}

# The impacts no error, crash or hang announces: a finding may say an event was one of them
# (the state was lost silently, and the error came later), never that a crash only refused.
SILENT_IMPACTS = ("corrupts", "loses", "drifts", "diverges")

# A difference's kind -> its impact. Kinds of a check's own verdict (sanity, hygiene, accepted
# damage) have none of their own: the finding that explains one says; unexplained, the worst.
IMPACT_OF_KIND: dict[str, str] = {
    "values": "corrupts",
    "dtype": "corrupts",
    "shape": "corrupts",
    "value": "corrupts",
    "mesh": "corrupts",  # a DTensor on another world's mesh: its values cannot be read here
    "loss": "corrupts",
    "missing": "loses",
    "length": "loses",
    "type": "drifts",
    "unexpected": "drifts",
    "error": "refuses",
    "crash": "crashes",
    "hang": "hangs",
}
DIFFERENCE_KINDS = (
    "missing",
    "unexpected",
    "values",
    "dtype",
    "shape",
    "type",
    "length",
    "value",
    "loss",
    "mesh",
)
VERDICT_KINDS = ("sanity", "hygiene", "accepted", "problem")
EVENT_KINDS = ("error", "crash", "hang")
KINDS = DIFFERENCE_KINDS + VERDICT_KINDS + EVENT_KINDS


def worst(impacts: Any) -> str | None:
    """The worst of some impacts (None when there are none)."""
    given = set(impacts)
    ranked = [i for i in IMPACTS if i in given]
    return ranked[0] if ranked else None


# What a baseline keeps of an event's message: an error's exception type, a crash's signal or
# exit code (not which ranks, nor how long a hang waited)
_EVENT_HEAD = {
    "error": lambda message: message.split(":", 1)[0],
    "crash": lambda message: message.split(" (", 1)[0].split(";", 1)[0],
}


@dataclass(frozen=True)
class Observed:
    """One difference or error of a cell.

    scope: where it was seen ("full state", "local state", "live state after save", "resumed
    trajectory", "loaded state", "sanity", "hygiene", "damaged checkpoint", or for an error,
    crash or hang the phase: "cell", "[load phase, 2 ranks]"). kind: one of KINDS. key: the key
    path; for an error the call under test it was raised in. rank: the rank it was seen on
    (None: the gathered state). message: the comparer's message, or "Type: first line" of an
    error. count, index: for values, how many elements differ and the first differing index."""

    scope: str
    kind: str
    key: str = ""
    rank: int | None = None
    message: str = ""
    count: int | None = None
    index: tuple[int, ...] | None = None

    @property
    def impact(self) -> str | None:
        return IMPACT_OF_KIND.get(self.kind)

    @property
    def line(self) -> str:
        """The record as a line of the cell's detail: what a finding's detail pattern reads."""
        where = self.scope if self.rank is None else f"rank {self.rank} {self.scope}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"

    @property
    def signature(self) -> str:
        """What a baseline remembers of it: everything but the numbers of elements (a known
        difference that grows or shrinks is still the same difference); of an error, crash or
        hang the exception type or signal, not the rank (which rank raises first may vary)."""
        event = self.kind in EVENT_KINDS
        head = _EVENT_HEAD.get(self.kind, lambda m: "")(self.message)
        rank = "" if self.rank is None or event else f"rank {self.rank} "
        return " | ".join(p for p in (f"{rank}{self.scope}", self.kind, self.key, head) if p)

    def describe(self) -> str:
        """The record for a gate message: key, kind, rank, first index."""
        parts = [f"{self.kind} in {self.scope}"]
        if self.key:
            parts.append(f"key {self.key}")
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.index is not None:
            parts.append(f"first at index {self.index} ({self.count} elements)")
        return ", ".join(parts) + f": {self.message}"[:300]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scope": self.scope, "kind": self.kind}
        for name in ("key", "rank", "message", "count"):
            value = getattr(self, name)
            if value not in (None, ""):
                out[name] = value
        if self.index is not None:
            out["index"] = list(self.index)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Observed:
        index = data.get("index")
        return cls(
            data["scope"],
            data["kind"],
            data.get("key", ""),
            data.get("rank"),
            data.get("message", ""),
            data.get("count"),
            tuple(index) if index is not None else None,
        )


def verdict(kind: str, message: str, rank: int | None = None, scope: str = "") -> Observed:
    """A check's own verdict as a record: a sanity or hygiene problem, accepted damage. The
    scope is the kind unless said (e.g. "sanity after the load")."""
    if kind not in VERDICT_KINDS:
        raise ValueError(f"a check's verdict is one of {VERDICT_KINDS}, not {kind!r}")
    return Observed(scope or kind, kind, "", rank, message)


_PHASE = re.compile(r"^\[([^\]]*)\] ")
_RAISED = re.compile(r"^rank (\d+) raised (\S+) first(?: in (?:the harness's own code|(.+)))?:$")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")
_CRASH = re.compile(r"^rank (\d+) (.*)")


def _own_lines(outcome: str, detail: str) -> list[str]:
    """The detail's lines from the cell's own first line: without a rerun's note, and for a
    property without its headline, cell and repro lines (it ends "<outcome>: <the example's
    detail>")."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    lines = [line for line in lines if "hung in a warm world" not in line] or lines
    for i, line in enumerate(lines):
        if line.startswith(f"{outcome}: ") and i and lines[i - 1].startswith("repro: "):
            return [line.removeprefix(f"{outcome}: "), *lines[i + 1 :]]
    return lines


def from_detail(outcome: str, detail: str, scope: str = "cell") -> list[Observed]:
    """The error, crash or hang of a cell, read from its detail: the world writes its first line
    ("rank 1 raised KeyError first in strategy.load:", "rank 0 killed by SIGSEGV", "timed out
    after ..."), optionally led by the phase ("[load phase, 2 ranks] ..."). The message is the
    last exception line of the originating rank's block (a wrapper's carried error). scope: the
    phase it ended, when the caller knows it."""
    lines = _own_lines(outcome, detail)
    if not lines:
        return [Observed(scope, outcome)]
    head = lines[0]
    phase = _PHASE.match(head)
    if phase:  # "[save phase, 2 ranks]": the scope a check records, "save phase"
        scope, head = re.sub(r", \d+ ranks?$", "", phase.group(1)), head[phase.end() :]
    if outcome == "error":
        raised = _RAISED.match(head)
        if not raised:
            return [Observed(scope, "error", "", None, head[:240])]
        found = raised.group(2)
        for line in lines[1:]:
            if line.startswith("--- "):
                break
            if _EXCEPTION.match(line):
                found = line
        return [Observed(scope, "error", raised.group(3) or "", int(raised.group(1)), found[:240])]
    if outcome == "crash":
        crash = _CRASH.match(head)
        rank = int(crash.group(1)) if crash else None
        return [Observed(scope, "crash", "", rank, (crash.group(2) if crash else head)[:240])]
    return [Observed(scope, outcome, "", None, head[:240])]


_KIND_OF_MESSAGE = (
    ("values differ", "values"),
    ("dtype differs", "dtype"),
    ("shape differs", "shape"),
    ("type drift", "type"),
    ("type differs", "type"),
    ("length differs", "length"),
    ("foreign mesh", "mesh"),
    ("missing after load", "missing"),
    ("unexpected key", "unexpected"),
    ("expected ", "value"),
)
_SCOPED = re.compile(r"^(?:rank (\d+) )?(full state|local state|loaded state): (.*)$")
_LIVE = re.compile(r"^rank (\d+): save changed the live state: (.*)$")
_LOSS = re.compile(r"^rank (\d+) (step \d+): (loss .*)$")
_SANITY = re.compile(r"^(after the load, )?sanity: (.*)$")
_VALUES = re.compile(r": (\d+) of \d+ elements; first at index \(([\d, ]*)\)")


def _difference(scope: str, rank: int | None, text: str) -> Observed | None:
    """ "KEY: message" of the comparer (conformance.check.compare.Difference) as a record."""
    for marker, kind in _KIND_OF_MESSAGE:
        at = text.find(f": {marker}")
        if at >= 0:
            key, message = text[:at], text[at + 2 :]
            values = _VALUES.search(message) if kind == "values" else None
            index = (
                tuple(int(i) for i in values.group(2).replace(" ", "").split(",") if i) if values else None
            )
            count = int(values.group(1)) if values else None
            return Observed(scope, kind, key, rank, message, count, index)
    return None


def from_fail_detail(detail: str) -> list[Observed]:
    """The differences of a failing cell of a results.json written before the records existed,
    read from its detail's lines (which kept at most 8 a rank: "... and N more" are not
    records). A line no pattern reads is one record of its own ("problem")."""
    out = []
    head, *lines = _own_lines("fail", detail) or [""]
    if head.startswith("loaded a damaged checkpoint without an error"):
        out.append(verdict("accepted", head.split(", with other values")[0].split("; the values")[0]))
    for line in lines:
        if line.startswith("... and "):
            continue
        scoped, live, loss, sanity = (
            _SCOPED.match(line),
            _LIVE.match(line),
            _LOSS.match(line),
            _SANITY.match(line),
        )
        found = None
        if scoped:
            rank = int(scoped.group(1)) if scoped.group(1) else None
            found = _difference(scoped.group(2), rank, scoped.group(3))
        elif live:
            found = _difference("live state after save", int(live.group(1)), live.group(2))
        elif loss:
            found = Observed("resumed trajectory", "loss", loss.group(2), int(loss.group(1)), loss.group(3))
        elif sanity:
            found = verdict(
                "sanity", sanity.group(2), scope="sanity after the load" if sanity.group(1) else ""
            )
        else:
            found = _difference("loaded state", None, line)
        out.append(found or Observed("cell", "problem", "", None, line))
    return out or [Observed("cell", "problem", "", None, detail)]

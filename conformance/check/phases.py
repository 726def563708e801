"""Checks that take more than one cell: phases run one after another in worlds of the pool.

A check (resume, reshard, interop, corrupt) runs a phase per world (save in N ranks, load in
M ranks, ...), passing values from one phase to the next through its argument. A phase that
does not end ok ends the check with that outcome, its detail led by the phase's name.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Callable, Hashable
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

    def __init__(
        self,
        outcome: Outcome,
        phase: str,
        detail: str,
        raised_in: str = "",
        unfinished: tuple[tuple[int, str], ...] = (),
        scope: str = "",
    ) -> None:
        super().__init__(f"[{phase}] {detail}")
        self.outcome, self.phase, self.detail = outcome, phase, f"[{phase}] {detail}"
        self.scope = scope or phase  # what its records name as their scope ("load phase")
        self.raised_in = raised_in  # an error: the call under test it escaped from
        # an error: the ranks that never ended the phase after it, each with the call under test
        # it was inside ("" for the harness's own code)
        self.unfinished = unfinished

    def raised_by(self, *calls: str) -> bool:
        """Whether the phase ended in an error of the code under test, in one of `calls`."""
        return self.outcome is Outcome.ERROR and self.raised_in in calls


def observed_of(*phases: list[dict[str, Any]]) -> list[Observed]:
    """Every record the ranks of some phases returned (their values' "observed")."""
    return [o for values in phases for value in values for o in value.get("observed", ())]


@dataclass
class SharedSaves:
    """Checkpoints that cells of one pytest process share: the first cell that needs a save of
    a configuration runs it, and a copy of what it wrote is kept here, untouched; every later
    cell that needs it loads from a copy of its own, and gets a copy of what the save phase
    returned. A save is shared only when it ended ok (an error, crash or hang runs again in each
    cell), ran once (no rerun after a hang) and is self-contained: it wrote nothing beside its
    path, and no file of it names that path (a copy would still read the original). A cell's
    outcome does not depend on sharing: the save phase is seeded by its configuration, never by
    the cell, shared or not."""

    root: Path
    saved: dict[Hashable, tuple[Path, list[Any]]] = field(default_factory=dict)
    unshareable: set[Hashable] = field(default_factory=set)


def self_contained(path: Path) -> bool:
    """Whether a save at `path` can be copied: nothing else in its folder, and no file under it
    holds the path's text."""
    if [p.name for p in path.parent.iterdir()] != [path.name]:
        return False
    needle = str(path.parent).encode()
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return not any(needle in f.read_bytes() for f in files)


def copy_save(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)


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
    shared: SharedSaves | None = None  # None: every save is the cell's own (fresh worlds)

    def run(
        self,
        phase: str,
        size: int,
        fn: CellFn,
        arg: Any,
        *,
        other_world: bool = False,
        seed: int | None = None,
    ) -> list[Any]:
        """Every rank's return value, or PhaseError. other_world: in the pool's second world of
        that size, whose processes never run a first phase (they never held its objects). seed:
        the ranks' seed, the cell's unless said."""
        slot = "other" if other_world else ""
        seed = self.seed if seed is None else seed
        run = self.pool.run(self.backend, size, fn, arg, timeout_s=self.timeout_s, seed=seed, slot=slot)
        if run.status != "ok":
            scope = f"{phase} phase"
            self.observed += from_detail(run.status, run.detail, scope=scope)
            raise PhaseError(
                STATUS_OUTCOMES[run.status],
                f"{scope}, {size} ranks",
                run.described(run.detail),
                run.raised_in,
                run.unfinished,
                scope,
            )
        if run.note:
            self.reruns.append((phase, run))
        return run.values

    def refusal(self, exc: PhaseError, calls: tuple[str, ...], said: str) -> tuple[Outcome, str] | None:
        """How a phase that may refuse ended, where it raised: a pass, its detail led by `said`,
        when the code under test raised in one of `calls` and every rank ended the phase
        (raised or returned); a hang when it raised there on some rank while others never
        ended it (left in a collective, as a user's run would wait until the process group's
        timeout: that is no refusal), recorded; None for any other end (no refusal)."""
        if not exc.raised_by(*calls):
            return None
        inside = [(rank, call) for rank, call in exc.unfinished if call]
        if not inside:  # every rank ended the call (a rank may wait in the harness's code after it)
            return Outcome.PASS, f"{said}:\n{exc.detail}"
        waiting = [rank for rank, _ in inside]
        where = ", ".join(f"rank {rank} in {call}" for rank, call in inside)
        message = f"ranks {waiting} never ended {exc.raised_in} after a rank raised in it ({where})"
        self.observed.append(Observed(exc.scope, "hang", "", None, message))
        return Outcome.HANG, (
            f"{exc.raised_in} raised on one rank and left ranks {waiting} waiting inside the code "
            f"under test ({where}): a refusal must end every rank; left alone they wait until the "
            f"process group's timeout:\n{exc.detail}"
        )

    def save(
        self,
        size: int,
        fn: CellFn,
        arg_at: Callable[[str], Any],
        directory: Path,
        *,
        key: Hashable,
        seed: int,
    ) -> list[Any]:
        """The "save" phase of a configuration (`key`, its ranks seeded by `seed`), written at
        `directory` (run with `arg_at(directory)`), or copied there where the process already
        saved that configuration (SharedSaves). PhaseError as run()."""
        shared = self.shared
        try:
            hash(key)
        except TypeError:  # a factory that is no value (an unhashable instance): its own save
            shared = None
        if shared is None or key in shared.unshareable:
            return self.run("save", size, fn, arg_at(str(directory)), seed=seed)
        if key in shared.saved:
            master, values = shared.saved[key]
            copy_save(master, directory)
            return copy.deepcopy(values)
        reruns = len(self.reruns)
        values = self.run("save", size, fn, arg_at(str(directory)), seed=seed)
        if len(self.reruns) == reruns and directory.exists() and self_contained(directory):
            master = Path(tempfile.mkdtemp(prefix="shared-", dir=shared.root)) / "checkpoint"
            copy_save(directory, master)  # before the check damages or loads its own
            shared.saved[key] = (master, copy.deepcopy(values))
        else:
            shared.unshareable.add(key)
        return values

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

"""The lifecycle check's phases on the ranks (conformance.check.lifecycle decides the outcome):
the run, which trains and checkpoints, and the restart, which resumes.

The run calls the library's checkpointer after each training step the harness makes; or, when
the library runs the loop itself (`Driving.run`), hands it the harness's batches and keeps the
state from its hooks. Either way, before each save rank 0 keeps the canonical state that
checkpoint must give back, and before the interrupted step's save the files that commit it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from conformance.case import Case
from conformance.check.roundtrip import StrategyFactory, VacuousCheckError, differs_somewhere, fresh_state
from conformance.check.scenarios import Scenario
from conformance.check.snapshot import Snapshot, local_buffers
from conformance.check.transfer import canonical_of
from conformance.layout.builtin import builtin_strategy
from conformance.models import model_class
from conformance.strategy.lifecycle import Training
from conformance.strategy.protocol import TrainState
from conformance.strategy.under_test import UnderTest, strategy_under_test
from conformance.training import batch_of, train_state
from conformance.world import RankContext
from conformance.world.attribution import code_under_test, harness_code

RESUME_CALL = "checkpointer.resume"
KILLED_STATE = "state-before-the-kill.pt"  # rank 0's record of a killed run, beside its folder


@dataclass(frozen=True)
class LifeSpec:
    case: Case
    directory: str  # the base folder of the run
    scenario: Scenario
    strategy_factory: StrategyFactory = field(default=builtin_strategy)
    seed: str = ""  # the restart's seed checkpoint (Policy.seed)
    expected: dict[int, Snapshot] = field(default_factory=dict)  # the restart's: the run's states


def _call(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    with code_under_test(f"checkpointer.{name}"):
        return fn(*args, **kwargs)


class Recorder:
    """What the harness keeps over a run, around each save (SaveHooks for a library that runs
    the loop itself): rank 0's canonical state after the step, the interrupted step's commit files
    as they were before its save; after the last save of a killed run, every rank killed."""

    def __init__(self, spec: LifeSpec, strategy: UnderTest, state: TrainState, ctx: RankContext) -> None:
        self.spec, self.strategy, self.state, self.ctx = spec, strategy, state, ctx
        self.expected: dict[int, Snapshot | None] = {}
        self.commits: dict[str, bytes | None] = {}
        self.seen: list[int] = []

    def before_save(self, step: int) -> None:
        with harness_code():
            scenario, base = self.spec.scenario, Path(self.spec.directory)
            if step == scenario.interrupted and self.ctx.rank == 0:  # its commit before the save
                self.commits = {
                    str(p): p.read_bytes() if p.is_file() else None
                    for p in self.strategy.commit_files(base, step)
                }
            self.expected[step] = canonical_of(self.state, self.spec.case, self.ctx)
            self.seen.append(step)

    def after_save(self, step: int) -> None:
        with harness_code():
            if self.spec.scenario.killed and step == self.spec.scenario.saves[-1]:
                self.kill()

    def record(self) -> dict[str, Any]:
        base = Path(self.spec.directory)
        return {
            "expected": self.expected,
            "folders": {s: str(self.strategy.step_folder(base, s)) for s in self.spec.scenario.saves},
            "buffers": local_buffers(self.state.model),
            "commits": self.commits,
        }

    def kill(self) -> None:
        """Every rank killed, the last save's write possibly still in flight; rank 0's record
        kept beside the folder first."""
        record = self.record()
        if self.ctx.rank == 0:
            torch.save(record, Path(self.spec.directory).parent / KILLED_STATE)
        dist.barrier()
        os.kill(os.getpid(), signal.SIGKILL)


def run_phase(ctx: RankContext, spec: LifeSpec) -> dict[str, Any]:
    case, scenario = spec.case, spec.scenario
    strategy = strategy_under_test(spec.strategy_factory, case)
    state = fresh_state(strategy, case, ctx, seed=ctx.seed)
    checkpointer = strategy.checkpointer(state, Path(spec.directory), scenario.policy, ctx)
    recorder = Recorder(spec, strategy, state, ctx)
    driving = getattr(checkpointer, "run", None)
    if callable(driving):
        if scenario.saves:  # its policy says which save is model-only (scenario.last)
            batches = [batch_of(case, ctx, s - 1) for s in range(1, max(scenario.saves) + 1)]
            training = Training(batches, model_class(case.model).loss)  # type: ignore[attr-defined]
            _call("run", driving, training, recorder)
            if recorder.seen != list(scenario.saves):
                raise VacuousCheckError(
                    f"the library's loop checkpointed after steps {recorder.seen}, not {list(scenario.saves)}: "
                    "the run is not the scenario's"
                )
    else:
        for step in scenario.saves:
            train_state(state, ctx, case, steps=1, start_step=step - 1)
            recorder.before_save(step)
            last = scenario.last and step == scenario.saves[-1]
            _call("save", checkpointer.save, step, last=last)
            recorder.after_save(step)
    _call("close", checkpointer.close)
    return recorder.record()


def resume_phase(ctx: RankContext, spec: LifeSpec) -> dict[str, Any]:
    case = spec.case
    strategy = strategy_under_test(spec.strategy_factory, case)
    state = fresh_state(strategy, case, ctx, seed=ctx.seed + 1, loading=True)
    before = canonical_of(state, case, ctx)
    if before is not None and any(
        not differs_somewhere(spec.expected[s], before) for s in spec.scenario.loads
    ):
        raise VacuousCheckError(
            "the fresh model already equals a saved one: a resume could not be told from none"
        )
    policy = dataclasses.replace(spec.scenario.policy, seed=spec.seed)
    checkpointer = strategy.checkpointer(state, Path(spec.directory), policy, ctx)
    loaded = bool(_call("resume", checkpointer.resume))
    after = canonical_of(state, case, ctx)
    _call("close", checkpointer.close)
    return {"before": before, "after": after, "loaded": loaded}

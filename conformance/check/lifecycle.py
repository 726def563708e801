"""The lifecycle check: a library's folder of checkpoints over a run and the restart after it
(retention, a save cut off or killed in flight, an empty folder, the seed load, the model-only
last save). One cell per scenario (conformance.check.scenarios), for registered strategies that
have the lifecycle extension (conformance.strategy.lifecycle).

The run (N ranks, conformance.check.lifecycle_run) builds the state, and before each save it
makes trains one step and keeps rank 0's canonical state (or lets a library that runs the loop
itself train, keeping the state from its hooks); then `close()`. The harness looks at the step folders the scenario
says must remain or be gone, and puts an interrupted step's commit back as it was before that
save began (the files the library writes last to commit a save, `commit_files`: what a save cut
off before them leaves). The restart (N ranks of the pool's other world: no process of the run) builds a fresh
state with other weights, calls `resume()` and compares rank 0's canonical state bitwise with
the step the scenario allows (any of them, for a save killed in flight), or with the fresh state
itself where nothing may load. A resume that raises passes only where the scenario allows a
refusal; one that starts fresh although a complete step was there fails (it loses the run), and
so does one that says it loaded from an empty folder. A model-only last save is read in one
process (`read_export`) and must load strict=True into the plain model with the trained values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from conformance.case import Case
from conformance.check.base import CaseCells, Check, Feature, Under
from conformance.check.compare import compare_states, first_of_each_kind
from conformance.check.hygiene import hygiene_problems
from conformance.check.lifecycle_run import KILLED_STATE, RESUME_CALL, LifeSpec, resume_phase, run_phase
from conformance.check.phases import PhaseError, Phases
from conformance.check.roundtrip import limit_lines
from conformance.check.scenarios import SCENARIOS, Scenario
from conformance.check.slices import Slice
from conformance.check.snapshot import Snapshot
from conformance.models import build_model, carries
from conformance.observed import Observed, verdict
from conformance.outcome import Outcome
from conformance.strategy.under_test import strategy_under_test
from conformance.world import RankContext


@dataclass(frozen=True)
class ExportSpec:
    run: LifeSpec
    expected: Snapshot  # the state at the last save
    copies: tuple[Snapshot, ...]  # the saving ranks' own buffers


def export_phase(ctx: RankContext, spec: ExportSpec) -> list[str]:
    """The model-only last save, read in one process, against the plain model (the hygiene
    check's rules)."""
    run = spec.run
    strategy = strategy_under_test(run.strategy_factory, run.case)
    exported = strategy.read_export(Path(run.directory), run.scenario.saves[-1], run.scenario.policy)
    plain = build_model(run.case.model, seed=0, rank=0, world_size=run.case.world_size)
    return limit_lines(hygiene_problems(exported, plain, spec.expected, spec.copies))


def put_back(path: Path, before: bytes | None) -> None:
    """A commit file as it was before the save began: absent, or its old bytes."""
    if before is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(before)


def disk_problems(scenario: Scenario, folders: dict[int, str]) -> list[str]:
    """The step folders the scenario's retention leaves, against what must remain and be gone."""
    problems = [
        f"step {s}'s folder {Path(folders[s]).name} is gone" for s in scenario.kept if not _holds(folders[s])
    ]
    problems += [
        f"step {s}'s folder {Path(folders[s]).name} is still there"
        for s in scenario.gone
        if _holds(folders[s])
    ]
    return problems


def _holds(folder: str) -> bool:
    path = Path(folder)
    return path.exists() and (path.is_file() or any(p.is_file() for p in path.rglob("*")))


def _at_the_kill(scenario: Scenario, folders: dict[int, str]) -> str:
    """Whether the kill met the last save's write: its folder as the killed run left it (a save
    that finished before the kill resumes as a synchronous one would)."""
    last = scenario.saves[-1]
    if _holds(folders[last]):
        return f"after the kill, step {last}'s folder {Path(folders[last]).name} held files (its write had begun, or ended)"
    return f"after the kill, step {last}'s folder {Path(folders[last]).name} was not there: the kill met its write in flight"


def _seeded_view(expected: Snapshot, before: Snapshot) -> Snapshot:
    """What a seeded restart must hold: the seed's model, everything else as freshly built."""
    model = ("param/", "buffer/")
    return {
        k: (expected[k] if k.startswith(model) else v)
        for k, v in before.items()
        if k in expected or not k.startswith(model)
    }


def resume_verdict(
    scenario: Scenario, expected: dict[int, Snapshot], resumed: dict[str, Any]
) -> tuple[Outcome, str, list[Observed]]:
    """The restart's outcome, its detail, and every difference as a record (a failing cell's
    records are what a finding explains, one by one, and what the gate compares)."""
    before, after, loaded = resumed["before"], resumed["after"], resumed["loaded"]
    if not scenario.loads:
        changed = compare_states(before, after)
        if loaded or changed:
            said = "says it resumed" if loaded else "says it loaded nothing"
            problem = f"{said} from a folder with no checkpoint, and {len(changed)} values changed"
            records = [verdict("problem", problem)] + [
                d.observed("restarted state") for d in first_of_each_kind(changed)
            ]
            return Outcome.FAIL, problem + ":\n" + "\n".join(limit_lines([str(d) for d in changed])), records
        return Outcome.PASS, "loaded nothing and said so: the fresh state is untouched, bitwise", []
    wanted = {
        s: _seeded_view(expected[s], before) if scenario.seeded else expected[s] for s in scenario.loads
    }
    if not loaded:
        problem = f"started fresh although step {min(scenario.loads)} had been saved, complete: the run's checkpoints are lost to it"
        return Outcome.FAIL, problem, [verdict("problem", problem)]
    for step, want in sorted(wanted.items(), reverse=True):
        if not compare_states(want, after):
            return (
                Outcome.PASS,
                f"resumed step {step}, bitwise ({len(want)} entries of the canonical state)",
                [],
            )
    latest = max(scenario.loads)
    differences = compare_states(wanted[latest], after)
    other = [s for s, snap in expected.items() if s not in scenario.loads and not compare_states(snap, after)]
    which = f"; it is step {other[0]}'s state, which it must not resume" if other else ""
    records = [d.observed("restarted state") for d in first_of_each_kind(differences)]
    return (
        Outcome.FAIL,
        f"resumed, but not step {latest}'s state{which}: {len(differences)} differences:\n"
        + "\n".join(limit_lines([str(d) for d in differences])),
        records,
    )


def execute(phases: Phases, case: Case, under: Under) -> tuple[Outcome, str]:
    scenario = SCENARIOS[case.variant]
    lacks = CHECK.lacks(under.factory(case))
    if lacks:
        return Outcome.UNSUPPORTED, f"the strategy has no {', '.join(lacks)}: no lifecycle of its own"
    base = phases.scratch()
    spec = LifeSpec(case, str(base), scenario, under.factory)
    seen = len(phases.observed)
    try:
        record = phases.run("run", case.world_size, run_phase, spec)[0]
    except PhaseError as exc:
        kept = base.parent / KILLED_STATE
        if not (scenario.killed and exc.outcome is Outcome.CRASH and kept.exists()):
            return exc.outcome, exc.detail
        record = torch.load(kept, weights_only=False)
        del phases.observed[seen:]  # the kill is the scenario's own, not an outcome of the cell
    problems = disk_problems(scenario, record["folders"])
    if scenario.interrupted:
        if not record["commits"]:
            raise ValueError(f"{case.id}: the strategy names no commit file of step {scenario.interrupted}")
        for name, before in record["commits"].items():
            put_back(Path(name), before)
    expected = record["expected"]
    if scenario.exported:
        last = scenario.saves[-1]
        try:
            found = phases.run(
                "read in one process", 1, export_phase, ExportSpec(spec, expected[last], (record["buffers"],))
            )[0]
        except PhaseError as exc:
            return exc.outcome, exc.detail
        problems += found
        phases.observed += [verdict("hygiene", p) for p in found]
        outcome = (Outcome.FAIL, f"{len(problems)} problems:\n" + "\n".join(problems)) if problems else None
        return outcome or (
            Outcome.PASS,
            "the model-only last save loads strict=True into the plain model, bitwise the trained values",
        )
    seed = record["folders"][scenario.saves[-1]] if scenario.seeded else ""
    restart = dataclasses.replace(
        spec,
        directory=str(phases.scratch()) if scenario.seeded else spec.directory,
        seed=seed,
        expected=expected,
    )
    try:
        resumed = phases.run("restart", case.world_size, resume_phase, restart, other_world=True)[0]
    except PhaseError as exc:
        if scenario.may_refuse and not problems:
            refused = phases.refusal(exc, (RESUME_CALL,), "the resume refused, as it may")
            if refused:
                return refused
        return exc.outcome, exc.detail
    outcome, detail, records = resume_verdict(scenario, expected, resumed)
    if scenario.killed:
        detail += "\n" + _at_the_kill(scenario, record["folders"])
    phases.observed += records
    if problems:
        phases.observed += [verdict("problem", p) for p in problems]
        return Outcome.FAIL, f"{len(problems)} problems with the folder after the run:\n" + "\n".join(
            problems
        ) + f"\nthe restart: {detail}"
    return outcome, detail


def _scenarios(storage: Any) -> tuple[str, ...]:
    return tuple(SCENARIOS)


# A library's lifecycle on the data-parallel layout it is given (FSDP2), or brings itself (the
# layouts a strategy brings take DDP's cells: DeepSpeed's ZeRO stages), the default optimizer.
LIFECYCLE_SLICE = Slice(
    "library lifecycles", (("ddp", "replicate"), ("fsdp2", "shard")), ("dsd_sharded",), storages=("dcp",)
)
# and with tied weights (the tied transformer): an export must give back both names of the
# shared tensor (the "tied export" column), which the covering keeps a cell of per strategy
LIFECYCLE_TIED_SLICE = dataclasses.replace(LIFECYCLE_SLICE, models=("mlp", "tied_transformer"))


def _tied_export(axes: Mapping[str, Any]) -> bool:
    scenario = SCENARIOS.get(axes.get("variant", ""))
    return scenario is not None and scenario.exported and "tied weights" in carries(axes["model"])


CHECK = Check(
    name="lifecycle",
    title="Library lifecycles: retention, interrupted and killed saves, empty folders, seed loads, exports",
    shape=CaseCells(
        {
            "ci": ((LIFECYCLE_SLICE, (2,)),),
            "default": ((LIFECYCLE_TIED_SLICE, (2,)),),
            "full": ((LIFECYCLE_TIED_SLICE, (2,)),),
        },
        variants=_scenarios,
        kinds=("full", "sharded"),  # a library's own: a full file a step, or every rank's shard
        builtin=False,
    ),
    registered=True,
    execute=execute,
    needs=("checkpointer", "step_folder", "commit_files"),  # and read_export for an exporting scenario
    features=(
        *(
            Feature(
                s.name.replace("_", " "), s.meaning, selects=lambda axes, n=s.name: axes.get("variant") == n
            )
            for s in SCENARIOS.values()
        ),
        Feature(
            "tied export",
            "a model-only export of a model with tied weights loads strict=True into the plain model",
            selects=_tied_export,
        ),
    ),
)

"""The lifecycle check's scenarios: what happens to a library's folder of checkpoints over a run
and the restart after it. Each is a value (the variant of a lifecycle cell); a new one is one
object here and its line in SCENARIOS.

A run trains one step before each save it makes (`saves`); the harness keeps the state after
each step (rank 0's canonical state) as what the checkpoint of that step must give back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conformance.strategy.lifecycle import Policy


@dataclass(frozen=True)
class Scenario:
    """name: the variant word of its cells. meaning: its column's sense. policy: the library's
    configuration for the run (and the restart). saves: the steps the run checkpoints. last: its
    last save is the run's last (`save(step, last=True)`). killed: every rank is killed
    (SIGKILL) right after the last save returns, its write possibly still in flight.
    interrupted: the step whose commit the harness puts back as it was before that save began,
    before the restart (the files the library writes last to commit a save, `commit_files`: what a
    save cut off before them leaves). kept, gone: the step
    folders that must remain, and must be gone, after the run. loads: the steps whose state the
    restart's resume may give, bitwise (empty: it must load nothing, and say so). may_refuse: a
    resume that raises passes (no complete checkpoint it could be sure of). seeded: the restart
    runs in an empty folder with the run's last step folder as its seed (Policy.seed); the model
    must be that step's, the rest as freshly built. exported: the last save is read as an export
    in one process (read_export) instead of resumed, and must load strict into the plain model."""

    name: str
    meaning: str
    policy: Policy = field(default_factory=Policy)
    saves: tuple[int, ...] = (1, 2)
    last: bool = False
    killed: bool = False
    interrupted: int = 0
    kept: tuple[int, ...] = ()
    gone: tuple[int, ...] = ()
    loads: tuple[int, ...] = ()
    may_refuse: bool = False
    seeded: bool = False
    exported: bool = False


# Five saves, keep 2: steps 4 and 5 must remain, 1 and 2 be gone. Step 3 may remain: a library
# prunes at a save's call, and an asynchronous save's folder may not exist yet then (torchtitan's
# async row keeps it or not by the timing of its writer thread); keeping one more until the next
# save loses nothing.
KEEP_LATEST = Scenario(
    "keep_latest",
    "keeps the latest k: the older step folders deleted, the latest k there, the latest resumes bitwise",
    Policy(keep_latest=2),
    saves=(1, 2, 3, 4, 5),
    kept=(4, 5),
    gone=(1, 2),
    loads=(5,),
)
INTERRUPTED = Scenario(
    "interrupted",
    "a save cut off before its commit: the restart resumes the last complete step, or refuses",
    interrupted=2,
    kept=(1,),
    loads=(1,),
    may_refuse=True,
)
KILLED = Scenario(
    "killed",
    "every rank killed while an asynchronous save is in flight: the restart resumes a complete "
    "step (the one in flight if it finished, else the one before), or refuses",
    killed=True,
    loads=(1, 2),
    may_refuse=True,
)
EMPTY_FOLDER = Scenario(
    "empty_folder",
    "a restart with no checkpoint: the resume loads nothing and says so (or refuses)",
    saves=(),
    may_refuse=True,
)
SEED_LOAD = Scenario(
    "seed_load",
    "the initial (seed) load: the seed's model bitwise, the optimizer and scheduler as built",
    kept=(2,),
    loads=(2,),
    seeded=True,
)
MODEL_ONLY_LAST = Scenario(
    "model_only_last",
    "the last save model-only: it loads strict=True into the plain model, the trained values",
    Policy(model_only_last=True),
    last=True,
    kept=(2,),
    exported=True,
)
HF_LAST = Scenario(
    "hf_last",
    "the last save model-only in Hugging Face safetensors: it loads strict=True into the plain "
    "model, the trained values",
    Policy(model_only_last=True, export_hf=True),
    last=True,
    kept=(2,),
    exported=True,
)

SCENARIOS: dict[str, Scenario] = {
    s.name: s for s in (KEEP_LATEST, INTERRUPTED, KILLED, EMPTY_FOLDER, SEED_LOAD, MODEL_ONLY_LAST, HF_LAST)
}

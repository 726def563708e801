"""The corrupt check: a damaged checkpoint must make the strategy's load raise, in time.

The strategy saves in its world; the harness damages what was written (the variant); a
fresh world of the same size loads it. The strategy's load raising on some rank (first, in
`load` or `load_before_wrap`) passes, and the error goes into the detail so people can judge
whether it is clear; an exception anywhere else (wrapping, or the harness) never does. Loading "successfully" fails the cell
(with other values or not), and so do a hang and a crash.

Variants (which apply is the storage's `damage`; where its parts are, its own methods):
- truncated: the largest file cut to half its size;
- flipped_bytes: 16 bytes inverted inside the largest tensor payload (located through the
  zip directory of a torch.save file, or DCP's own metadata of where each item lies);
- missing_shard: the last rank's file deleted (per-rank files; DCP's data file of that rank);
  unsupported where those files hold no byte (a format that writes replicated state from the
  lowest rank keeps nothing there: deleting them would damage nothing);
- missing_metadata: DCP's .metadata deleted;
- other_model: loaded into a model with the same parameter names and other shapes (the
  model's twin in conformance.models.RESHAPED; a model without one has no such cell).

The data-parallel rows damage every storage; the parallel layouts (tensor parallel alone and
on a 2-D mesh, pipeline stages) the sharded state through the formats that hold it: DCP and a
file per rank.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conformance.case import Case
from conformance.check.base import CaseCells, Check, Feature, Under
from conformance.check.phases import PhaseError, Phases, observed_of
from conformance.check.slices import TP_WRAPPERS, Slice
from conformance.check.transfer import LoadSpec, load_phase, saved
from conformance.models import RESHAPED
from conformance.observed import verdict
from conformance.outcome import Outcome
from conformance.strategy.storage import Storage
from conformance.strategy.storage.base import files
from conformance.strategy.under_test import LOADING_CALLS

FLIP = 16


def _flip(path: Path, offset: int, length: int) -> str:
    start = offset + max(0, length // 2 - FLIP // 2)
    with path.open("r+b") as f:
        f.seek(start)
        data = f.read(min(FLIP, length))
        f.seek(start)
        f.write(bytes(b ^ 0xFF for b in data))
    return f"inverted {len(data)} bytes at offset {start} of {path.name} (a tensor payload of {length} bytes)"


class DamageDoesNotApply(ValueError):
    """What a damage would delete holds nothing of the checkpoint: the cell could only pass or
    fail vacuously, so it is unsupported for that format, saying why."""


def _other_ranks_wrote(storage: Storage, directory: Path, world_size: int) -> bool:
    """Whether the storage's own names for a rank's files match some other rank's files (so that
    they are right, and a rank without a match wrote nothing)."""
    return any(storage.rank_files(directory, rank) for rank in range(world_size - 1))


def damage(directory: Path, variant: str, storage: Storage, world_size: int) -> str:
    """Damage the checkpoint in place, where the storage says its parts are; returns what was
    done, for the detail."""
    written = files(directory)
    if not written:
        raise FileNotFoundError(f"the strategy wrote nothing under {directory}")
    if variant == "truncated":
        data = storage.data_files(directory)
        if not data:
            raise FileNotFoundError(f"{storage.name} names no data file in {[p.name for p in written]}")
        target = max(data, key=lambda p: p.stat().st_size)
        size = target.stat().st_size
        with target.open("r+b") as f:
            f.truncate(size // 2)
        return f"cut {target.name} from {size} to {size // 2} bytes"
    if variant == "flipped_bytes":
        return _flip(*storage.payload(directory))
    if variant in ("missing_shard", "missing_metadata"):
        victims = (
            storage.rank_files(directory, world_size - 1)
            if variant == "missing_shard"
            else storage.metadata_files(directory)
        )
        if not victims and variant == "missing_shard" and _other_ranks_wrote(storage, directory, world_size):
            raise DamageDoesNotApply(
                f"rank {world_size - 1} wrote no file ({[p.name for p in written]} are the other ranks'): "
                f"{storage.name} keeps no part of the checkpoint on that rank (replicated state written "
                "by another rank), so there is nothing of it to delete"
            )
        if not victims:  # the storage's names match nothing it wrote: its declaration is wrong
            raise FileNotFoundError(
                f"{storage.name} names no file for {variant} in {[p.name for p in written]}"
            )
        if variant == "missing_shard" and not any(v.stat().st_size for v in victims):
            raise DamageDoesNotApply(
                f"rank {world_size - 1}'s files ({', '.join(v.name for v in victims)}) hold no byte: "
                f"{storage.name} keeps no part of the checkpoint on that rank (replicated state "
                "written by the lowest rank), so deleting them damages nothing"
            )
        for victim in victims:
            victim.unlink()
        return f"deleted {', '.join(v.name for v in victims)}"
    if variant == "other_model":
        return "left as saved; loaded into the model's twin with the same names and other shapes"
    raise ValueError(f"unknown corruption {variant!r}")


def execute(phases: Phases, case: Case, under: Under) -> tuple[Outcome, str]:
    factory = under.factory
    directory = phases.scratch()
    save_case = dataclasses.replace(case, check="roundtrip", variant="")
    load_case = (
        dataclasses.replace(save_case, model=RESHAPED[case.model])
        if case.variant == "other_model"
        else save_case
    )
    try:
        written = saved(phases, save_case, str(directory), factory)
    except PhaseError as exc:
        return exc.outcome, exc.detail
    if under.storage is None:
        raise ValueError(f"{case.id}: no storage object says how to damage what it wrote")
    try:
        done = damage(directory, case.variant, under.storage, case.world_size)
    except DamageDoesNotApply as exc:
        return Outcome.UNSUPPORTED, f"{case.variant} does not apply to what the strategy wrote: {exc}"
    try:
        loaded = phases.run(
            "load",
            case.world_size,
            load_phase,
            LoadSpec(load_case, str(directory), written[0]["expected"], factory),
        )
    except PhaseError as exc:
        refused = phases.refusal(exc, LOADING_CALLS, f"the load raised, as it must ({done})")
        if refused:
            return refused
        if exc.outcome is Outcome.HARNESS_ERROR:  # whether the load raised is not known
            return exc.outcome, f"{done}; then the harness raised:\n{exc.detail}"
        return exc.outcome, f"{done}; the load did not raise but:\n{exc.detail}"
    differences = [p for value in loaded for p in value["problems"]] + loaded[0]["failures"]
    phases.observed += [verdict("accepted", f"loaded a damaged checkpoint without an error ({done})")]
    phases.observed += observed_of(loaded)
    if differences:
        return Outcome.FAIL, (
            f"loaded a damaged checkpoint without an error ({done}), with other values:\n"
            + "\n".join(differences)
        )
    return Outcome.FAIL, f"loaded a damaged checkpoint without an error ({done}); the values compared equal"


def _damage_of(storage: Storage) -> tuple[str, ...]:
    return storage.damage


CORRUPT_SLICE = Slice(
    "bad checkpoints",
    (("ddp", "replicate"), ("fsdp1", "full_shard"), ("fsdp2", "shard")),
    ("dsd_sharded", "sd_full", "sd_sharded"),
)
# The parallel layouts: their sharded state (DTensor shards of TP, a stage's own layers; pipeline
# stages also flattened by name, dcp-pipeline-param-groups-lost) through DCP and per-rank files.
CORRUPT_LAYOUT_SLICE = Slice(
    "bad checkpoints of parallel layouts",
    (*TP_WRAPPERS, ("pp", "stages")),
    ("dsd_sharded", "dsd_sharded_flat"),
    storages=("dcp", "torch_save_per_rank"),
    models=("llama",),
)

CHECK = Check(
    name="corrupt",
    title="Bad checkpoints: the load must raise",
    shape=CaseCells(
        {
            "ci": ((CORRUPT_SLICE, (2,)),),
            "default": ((CORRUPT_SLICE, (2,)), (CORRUPT_LAYOUT_SLICE, (2,))),
            "full": ((CORRUPT_SLICE, (1, 2, 4)), (CORRUPT_LAYOUT_SLICE, (2, 4))),
        },
        variants=_damage_of,
    ),
    registered=True,
    execute=execute,
    features=(Feature("rejects bad", "a damaged checkpoint fails to load"),),
)

"""The corrupt check: a damaged checkpoint must make the strategy's load raise, in time.

The strategy saves in its world; the harness damages what was written (the variant); a
fresh world of the same size loads it. The strategy's load raising on some rank (first, in
`load` or `load_before_wrap`) passes, and the error goes into the detail so people can judge
whether it is clear; an exception anywhere else (wrapping, or the harness) never does. Loading "successfully" fails the cell
(with other values or not), and so do a hang and a crash.

Variants (which apply depends on the storage, see matrix.VARIANTS):
- truncated: the largest file cut to half its size;
- flipped_bytes: 16 bytes inverted inside the largest tensor payload (located through the
  zip directory of a torch.save file, or DCP's own metadata of where each item lies);
- missing_shard: the last rank's file deleted (per-rank files; DCP's data file of that rank);
- missing_metadata: DCP's .metadata deleted;
- other_model: loaded into a model with the same parameter names and other shapes.
"""

from __future__ import annotations

import dataclasses
import struct
import zipfile
from pathlib import Path

from conformance.case import Case
from conformance.check.phases import PhaseError, Phases
from conformance.check.roundtrip import StrategyFactory
from conformance.check.transfer import LoadSpec, SaveSpec, load_phase, save_phase
from conformance.outcome import Outcome
from conformance.strategy.under_test import LOADING_CALLS

FLIP = 16
OTHER_MODEL = "mlp_reshaped"


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def _zip_payload(path: Path) -> tuple[int, int]:
    """(offset, length) of the largest tensor record in a torch.save (zip) file."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with path.open("rb") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def _dcp_payload(directory: Path) -> tuple[Path, int, int]:
    """(file, offset, length) of the largest item DCP's metadata says it wrote."""
    from torch.distributed.checkpoint import FileSystemReader

    storage = FileSystemReader(str(directory)).read_metadata().storage_data
    info = max(storage.values(), key=lambda s: s.length)
    return directory / info.relative_path, info.offset, info.length


def _flip(path: Path, offset: int, length: int) -> str:
    start = offset + max(0, length // 2 - FLIP // 2)
    with path.open("r+b") as f:
        f.seek(start)
        data = f.read(min(FLIP, length))
        f.seek(start)
        f.write(bytes(b ^ 0xFF for b in data))
    return f"inverted {len(data)} bytes at offset {start} of {path.name} (a tensor payload of {length} bytes)"


def damage(directory: Path, variant: str, storage: str, world_size: int) -> str:
    """Damage the checkpoint in place; returns what was done, for the detail."""
    files = _files(directory)
    if not files:
        raise FileNotFoundError(f"the strategy wrote nothing under {directory}")
    if variant == "truncated":
        target = max(files, key=lambda p: p.stat().st_size)
        size = target.stat().st_size
        with target.open("r+b") as f:
            f.truncate(size // 2)
        return f"cut {target.name} from {size} to {size // 2} bytes"
    if variant == "flipped_bytes":
        if storage == "dcp":
            return _flip(*_dcp_payload(directory))
        target = max(files, key=lambda p: p.stat().st_size)
        return _flip(target, *_zip_payload(target))
    if variant == "missing_shard":
        last = world_size - 1
        pattern = f"rank{last}.pt" if storage == "torch_save_per_rank" else f"__{last}_*.distcp"
        victims = sorted(directory.glob(pattern))
        if not victims:
            raise FileNotFoundError(f"no file {pattern} to delete in {[p.name for p in files]}")
        for victim in victims:
            victim.unlink()
        return f"deleted {', '.join(v.name for v in victims)}"
    if variant == "missing_metadata":
        (directory / ".metadata").unlink()
        return "deleted .metadata"
    if variant == "other_model":
        return f"left as saved; loaded into {OTHER_MODEL} (same names, other shapes)"
    raise ValueError(f"unknown corruption {variant!r}")


def execute(phases: Phases, case: Case, factory: StrategyFactory) -> tuple[Outcome, str]:
    directory = phases.scratch()
    save_case = dataclasses.replace(case, check="roundtrip", variant="")
    load_case = (
        dataclasses.replace(save_case, model=OTHER_MODEL) if case.variant == "other_model" else save_case
    )
    try:
        saved = phases.run("save", case.world_size, save_phase, SaveSpec(save_case, str(directory), factory))
    except PhaseError as exc:
        return exc.outcome, exc.detail
    done = damage(directory, case.variant, case.storage, case.world_size)
    try:
        loaded = phases.run(
            "load",
            case.world_size,
            load_phase,
            LoadSpec(load_case, str(directory), saved[0]["expected"], factory),
        )
    except PhaseError as exc:
        if exc.raised_by(*LOADING_CALLS):
            return Outcome.PASS, f"the load raised, as it must ({done}):\n{exc.detail}"
        if exc.outcome is Outcome.HARNESS_ERROR:  # whether the load raised is not known
            return exc.outcome, f"{done}; then the harness raised:\n{exc.detail}"
        return exc.outcome, f"{done}; the load did not raise but:\n{exc.detail}"
    differences = [p for value in loaded for p in value["problems"]] + loaded[0]["failures"]
    if differences:
        return Outcome.FAIL, (
            f"loaded a damaged checkpoint without an error ({done}), with other values:\n"
            + "\n".join(differences)
        )
    return Outcome.FAIL, f"loaded a damaged checkpoint without an error ({done}); the values compared equal"

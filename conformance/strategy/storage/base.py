"""What every storage is: how a state dict reaches the disk and comes back, and what that
means for the checks (which damage applies, where a rank's files are, which loads it refuses
by design). One storage a file of this package, registered in conformance.strategy.storage."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path
from typing import Any, Protocol

from conformance.strategy.protocol import Storage as IoStorage

# A reshard the storage refuses by design: (axes of the transfer it applies to, beyond
# check=reshard and this storage; the reason).
Refusal = tuple[dict[str, Any], str]


class Storage(IoStorage, Protocol):
    """A storage as the checks know it: how it saves, loads and reads (protocol.Storage, what
    a composed strategy calls), and what that means for the checks."""

    name: str  # the storage axis of a cell id
    one_file_by_rank0: bool  # rank 0 writes one file that every rank reads
    per_rank: bool  # every rank writes a file of its own and reads its own back
    loads_in_place: bool  # loads into a template state dict the fresh model and optimizer give
    representative: bool  # a property's group of cells is stood for by a cell of this storage first
    damage: tuple[str, ...]  # the corrupt check's variants that apply to what it writes
    reshard_refusals: tuple[Refusal, ...]
    # optional `saves_with_dcp: bool`: dcp.save writes it (a state dict's keys become strings);
    # optional `reads: tuple[str, ...]`: the other storages whose checkpoints its load reads (a
    # converting load), which the interop grid then does not refuse;
    # optional `unavailable: str | None`: why this installation cannot provide it (the torch
    # version, a missing package); its cells are then unsupported with that reason

    def payload(self, path: Path) -> tuple[Path, int, int]:
        """(file, offset, length) of the largest tensor payload it wrote (flipped_bytes)."""
        ...

    def data_files(self, path: Path) -> list[Path]:
        """The files that hold its data (truncated cuts the largest): all it wrote, unless it
        writes files beside them that hold none (a script, a manifest)."""
        ...

    def rank_files(self, path: Path, rank: int) -> list[Path]:
        """The files that hold `rank`'s part (missing_shard); [] where there are none."""
        ...

    def metadata_files(self, path: Path) -> list[Path]:
        """The files that say what the others hold (missing_metadata); [] where there are none."""
        ...


def files(path: Path) -> list[Path]:
    """The files a checkpoint is: those under a directory, or the one file a strategy wrote at
    the path (a registered strategy may write either)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file())


def largest_zip_payload(path: Path, among: list[Path] | None = None) -> tuple[Path, int, int]:
    """(file, offset, length) of the largest tensor record of the largest torch.save (zip)
    file under `path` (or of the files `among`), located through the zip directory."""
    target = max(files(path) if among is None else among, key=lambda p: p.stat().st_size)
    with zipfile.ZipFile(target) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with target.open("rb") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
    return target, info.header_offset + 30 + name_len + extra_len, info.file_size

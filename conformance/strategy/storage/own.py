"""A registered strategy's own format: it saves and loads itself, and the checks know only what
any checkpoint on disk has (files), found by looking at what it wrote."""

from __future__ import annotations

import fnmatch
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conformance.strategy.protocol import StateDict
from conformance.strategy.storage.base import Refusal, files, largest_zip_payload
from conformance.strategy.storage.dcp import DcpDirectory
from conformance.world import RankContext


@dataclass(frozen=True)
class OwnFormat:
    """What a registered strategy that does its own I/O writes, named by its label (a word of its
    cell ids). The damage that applies to any files: the largest cut short, bytes of a tensor
    payload inverted (located through DCP's metadata or a torch.save zip directory when it
    wrote one, else the middle of its largest file), a model of other shapes.

    data: a glob of the names of the files that hold its data: the damage goes there, not into
    what a library writes beside them (DeepSpeed's "*.pt": not the zero_to_fp32.py script it
    copies into every checkpoint). rank_file: a glob of the names of one rank's own files,
    "{rank}" in it (the missing_shard damage deletes the last rank's); "" when none is known.
    metadata: names of the files that say what the checkpoint holds (missing_metadata)."""

    name: str = "native"
    one_file_by_rank0: bool = False
    per_rank: bool = False
    loads_in_place: bool = False
    representative: bool = False
    damage: tuple[str, ...] = ("flipped_bytes", "other_model", "truncated")
    reshard_refusals: tuple[Refusal, ...] = ()
    data: str = "*"
    rank_file: str = ""
    metadata: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """A damage that needs to know which files to delete is declared with them: otherwise
        its cells could only fail in the harness, never say anything of the strategy."""
        needs = {
            "missing_shard": ("rank_file", self.rank_file),
            "missing_metadata": ("metadata", self.metadata),
        }
        for damage, (field_name, value) in needs.items():
            if damage in self.damage and not value:
                raise ValueError(
                    f"OwnFormat {self.name!r} declares the {damage} damage without {field_name}: "
                    f"name the files it deletes ({field_name}=...) or leave {damage} out of damage"
                )
        # the damage matches globs against bare file names (in every folder under the save)
        names = {"data": (self.data,), "rank_file": (self.rank_file,), "metadata": self.metadata}
        for field_name, values in names.items():
            for value in values:
                if "/" in value or "\\" in value:
                    raise ValueError(
                        f"OwnFormat {self.name!r}: {field_name}={value!r} names a path; it is matched "
                        f"against bare file names (in every folder of the save), so it never matches: "
                        f"give the file name alone, e.g. {value.replace(chr(92), '/').rsplit('/', 1)[-1]!r}"
                    )
        if self.rank_file and "{rank}" not in self.rank_file:
            raise ValueError(
                f"OwnFormat {self.name!r}: rank_file={self.rank_file!r} has no {{rank}}: the "
                "missing_shard damage needs the last rank's own files"
            )

    def data_files(self, path: Path) -> list[Path]:
        """The files holding its data (all it wrote unless `data` says)."""
        return [p for p in files(path) if fnmatch.fnmatch(p.name, self.data)]

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        raise NotImplementedError(f"{self.name}: the registered strategy saves itself")

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        raise NotImplementedError(f"{self.name}: the registered strategy loads itself")

    def read(self, path: Path) -> StateDict:
        raise NotImplementedError(f"{self.name}: the registered strategy reads itself (read_model_state)")

    def payload(self, path: Path) -> tuple[Path, int, int]:
        written = self.data_files(path)
        metadata = [p for p in written if p.name == ".metadata"]
        if metadata:
            return DcpDirectory().payload(metadata[0].parent)
        try:
            return largest_zip_payload(path, written)
        except (
            zipfile.BadZipFile,
            ValueError,
            OSError,
        ):  # not a torch.save file: the middle of the largest file
            target = max(written, key=lambda p: p.stat().st_size)
            return target, 0, target.stat().st_size

    def rank_files(self, path: Path, rank: int) -> list[Path]:
        if not self.rank_file:
            return []
        pattern = self.rank_file.format(rank=rank)
        return [p for p in files(path) if fnmatch.fnmatch(p.name, pattern)]

    def metadata_files(self, path: Path) -> list[Path]:
        return [p for p in files(path) if p.name in self.metadata]

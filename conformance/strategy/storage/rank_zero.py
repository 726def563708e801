"""torch_save: one torch.save file written by rank 0; every rank reads it back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from conformance.strategy.protocol import StateDict
from conformance.strategy.storage.base import Refusal, files, largest_zip_payload
from conformance.world import RankContext


@dataclass(frozen=True)
class RankZeroFile:
    """One torch.save file written by rank 0; every rank reads it back."""

    file_name: str = "checkpoint.pt"
    name: str = "torch_save"
    one_file_by_rank0: bool = True
    per_rank: bool = False
    loads_in_place: bool = False
    representative: bool = False
    damage: tuple[str, ...] = ("flipped_bytes", "other_model", "truncated")
    reshard_refusals: tuple[Refusal, ...] = ()

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        if ctx.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            torch.save(state, path / self.file_name)
        dist.barrier()

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        return torch.load(path / self.file_name, map_location=ctx.device, weights_only=False)

    def read(self, path: Path) -> StateDict:
        return torch.load(path / self.file_name, map_location="cpu", weights_only=True)

    def payload(self, path: Path) -> tuple[Path, int, int]:
        return largest_zip_payload(path)

    def data_files(self, path: Path) -> list[Path]:
        return files(path)

    def rank_files(self, path: Path, rank: int) -> list[Path]:
        return []

    def metadata_files(self, path: Path) -> list[Path]:
        return []

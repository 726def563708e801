"""What a cell function sees on its rank."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class RankContext:
    rank: int
    world_size: int
    backend: str  # gloo | nccl
    device: torch.device  # cpu for gloo, cuda:<local rank> for nccl
    cell_dir: Path  # a fresh directory shared by the ranks of this cell, removed after it
    seed: int  # the cell's seed; identical on every rank

    @property
    def is_rank0(self) -> bool:
        return self.rank == 0

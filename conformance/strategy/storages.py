"""Storages: how a state dict reaches the disk and comes back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from conformance.strategy.protocol import StateDict
from conformance.world import RankContext


@dataclass(frozen=True)
class RankZeroFile:
    """One torch.save file written by rank 0; every rank reads it back."""

    name: str = "checkpoint.pt"

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        if ctx.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            torch.save(state, path / self.name)
        dist.barrier()

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        return torch.load(path / self.name, map_location=ctx.device, weights_only=False)

    def read(self, path: Path) -> StateDict:
        return torch.load(path / self.name, map_location="cpu", weights_only=False)


@dataclass(frozen=True)
class PerRankFiles:
    """One torch.save file per rank, the recipe users follow for sharded state."""

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        path.mkdir(parents=True, exist_ok=True)
        torch.save(state, path / f"rank{ctx.rank}.pt")
        dist.barrier()

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        return torch.load(path / f"rank{ctx.rank}.pt", map_location=ctx.device, weights_only=False)

    def read(self, path: Path) -> StateDict:
        """Rank 0's file: where a full state is, every rank's file holds all of it."""
        return torch.load(path / "rank0.pt", map_location="cpu", weights_only=False)


@dataclass(frozen=True)
class DcpDirectory:
    """A torch.distributed.checkpoint directory; loads in place into the fresh model's state dict."""

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(state, checkpoint_id=str(path))

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        import torch.distributed.checkpoint as dcp

        state = template()
        dcp.load(state, checkpoint_id=str(path))
        return state

    def read(self, path: Path) -> StateDict:
        """The whole directory as one state dict, without a process group (dcp_to_torch_save)."""
        import tempfile

        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            dcp_to_torch_save(str(path), f"{tmp}/checkpoint.pt")
            return torch.load(f"{tmp}/checkpoint.pt", map_location="cpu", weights_only=False)

"""torch_save_per_rank: one torch.save file per rank, the recipe users follow for sharded state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from conformance.strategy.protocol import StateDict
from conformance.strategy.storage.base import Refusal, files, largest_zip_payload
from conformance.world import RankContext


@dataclass(frozen=True)
class PerRankFiles:
    """One torch.save file per rank, the recipe users follow for sharded state.

    A ShardedTensor unpickles against the process group current at load time (the default
    group, unless inside `torch.distributed._shard.api.load_with_process_group(group)`, as
    that API documents), so one file cannot hold ShardedTensors of two groups: experts sharded
    on their expert-data-parallel group beside dense layers sharded on the world, or HSDP's
    shard groups. Those of a group other than the world go to a file of their own,
    `rank<r>.group-<ranks>.pt`, loaded inside load_with_process_group over those ranks; the
    rank's file keeps a marker where each was."""

    name: str = "torch_save_per_rank"
    one_file_by_rank0: bool = False
    per_rank: bool = True
    loads_in_place: bool = False
    representative: bool = False
    damage: tuple[str, ...] = ("flipped_bytes", "missing_shard", "other_model", "truncated")
    reshard_refusals: tuple[Refusal, ...] = (
        (
            {"kind": "sharded"},
            "per-rank files of sharded state: each file is one rank's shard of the saving world",
        ),
        ({"direction": "grow"}, "per-rank files: the new ranks have no file to load"),
    )

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        path.mkdir(parents=True, exist_ok=True)
        kept, apart = _set_apart_by_group(state, ctx.world_size)
        torch.save(kept, path / f"rank{ctx.rank}.pt")
        for ranks, tensors in apart.items():
            torch.save(tensors, path / _group_file(ctx.rank, ranks))
        dist.barrier()

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        from torch.distributed._shard.api import load_with_process_group

        state = torch.load(path / f"rank{ctx.rank}.pt", map_location=ctx.device, weights_only=False)
        apart: dict[tuple[int, ...], list[Any]] = {}
        for ranks in _groups_set_apart(path):  # every rank makes every group, in one order
            if max(ranks) >= ctx.world_size:
                raise ValueError(
                    f"{path} holds ShardedTensors saved over ranks {list(ranks)}; this world has "
                    f"{ctx.world_size} ranks: per-rank files load in the world that saved them"
                )
            group = dist.new_group(list(ranks))
            mine = path / _group_file(ctx.rank, ranks)
            if mine.exists():
                with load_with_process_group(group):
                    apart[ranks] = torch.load(mine, map_location=ctx.device, weights_only=False)
        return _put_back(state, apart)

    def read(self, path: Path) -> StateDict:
        """Rank 0's file: where a full state is, every rank's file holds all of it."""
        return torch.load(path / "rank0.pt", map_location="cpu", weights_only=True)

    def payload(self, path: Path) -> tuple[Path, int, int]:
        return largest_zip_payload(path)

    def data_files(self, path: Path) -> list[Path]:
        return files(path)

    def rank_files(self, path: Path, rank: int) -> list[Path]:
        return [path / f"rank{rank}.pt"] if (path / f"rank{rank}.pt").exists() else []

    def metadata_files(self, path: Path) -> list[Path]:
        return []


_MARK = "set apart in the file of process group"  # the marker's key: {_MARK: ranks, "index": i}


def _group_file(rank: int, ranks: tuple[int, ...]) -> str:
    return f"rank{rank}.group-{'-'.join(map(str, ranks))}.pt"


def _groups_set_apart(path: Path) -> list[tuple[int, ...]]:
    """The groups any rank set apart, from the file names (the same list on every rank)."""
    names = {f.name.split(".group-", 1)[1][: -len(".pt")] for f in path.glob("rank*.group-*.pt")}
    return sorted(tuple(int(r) for r in name.split("-")) for name in names)


def _set_apart_by_group(state: Any, world_size: int) -> tuple[Any, dict[tuple[int, ...], list[Any]]]:
    """`state` with each ShardedTensor over a group other than the world replaced by a marker,
    and those tensors by their group's ranks, in the order the markers name."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    apart: dict[tuple[int, ...], list[Any]] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, ShardedTensor):
            ranks = tuple(dist.get_process_group_ranks(value._process_group))
            if ranks != tuple(range(world_size)):
                apart.setdefault(ranks, []).append(value)
                return {_MARK: list(ranks), "index": len(apart[ranks]) - 1}
            return value
        if isinstance(value, dict):
            return type(value)((k, walk(v)) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v) for v in value)
        return value

    return walk(state), apart


def _put_back(state: Any, apart: dict[tuple[int, ...], list[Any]]) -> Any:
    if isinstance(state, dict) and _MARK in state:
        return apart[tuple(state[_MARK])][state["index"]]
    if isinstance(state, dict):
        return type(state)((k, _put_back(v, apart)) for k, v in state.items())
    if isinstance(state, (list, tuple)):
        return type(state)(_put_back(v, apart) for v in state)
    return state

"""Registered strategies whose outcomes the suite must attribute right: a load that leaves state
on the saving world's mesh (the strategy's fail, never the harness's error), and a format that
cannot reshard by design (declared: a refused pass; undeclared: the strategy's error)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from conformance.case import Case
from conformance.layout.registry import layout_of
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

RESHARDS = Supports(wrappers=(("fsdp2", "shard"),), kinds=("sharded",), checks=("reshard", "roundtrip"))


def _full(value: object) -> object:
    return value.full_tensor() if hasattr(value, "full_tensor") else value  # type: ignore[attr-defined]


@dataclass(frozen=True)
class TorchSavesTheOptimizer:
    """The whole model state on every rank (full tensors, set_model_state_dict loads it at any
    world size) and each rank's `optimizer.state_dict()` through torch.save, as a hand-rolled
    checkpoint does. Loaded at another world size, rank r reads the saving rank r's optimizer
    file (or the last one): its DTensors come back on the saving world's mesh."""

    case: Case

    def wrap(self, model: torch.nn.Module, ctx: RankContext) -> torch.nn.Module:
        return layout_of(self.case).build(self.case).wrap(model, ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        path.mkdir(parents=True, exist_ok=True)
        model = {k: _full(v) for k, v in state.model.state_dict().items()}
        torch.save({"model": model, "optim": state.optim.state_dict()}, path / f"rank{ctx.rank}.pt")
        if ctx.rank == 0:
            (path / "world_size").write_text(str(ctx.world_size))
        dist.barrier()

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        saved = int((path / "world_size").read_text())
        loaded = torch.load(path / f"rank{min(ctx.rank, saved - 1)}.pt", weights_only=False)
        set_model_state_dict(state.model, loaded["model"], options=StateDictOptions(full_state_dict=True))
        state.optim.load_state_dict(loaded["optim"])


class RefusesToReshard(TorchSavesTheOptimizer):
    """The same files, and a load that raises at another world size: a format that cannot
    reshard by design, and says so."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        saved = int((path / "world_size").read_text())
        if saved != ctx.world_size:
            raise ValueError(
                f"saved by {saved} ranks, loading in {ctx.world_size}: this format cannot reshard"
            )
        super().load(state, path, ctx)


def foreign_mesh(case: Case) -> TorchSavesTheOptimizer:
    return TorchSavesTheOptimizer(case)


def refuses_to_reshard(case: Case) -> RefusesToReshard:
    return RefusesToReshard(case)


FOREIGN_MESH = RegisteredStrategy("foreign_mesh", foreign_mesh, RESHARDS, storage="rank_files")
REFUSAL = ({}, "one torch.save file per rank: the format belongs to the world size that wrote it")
REFUSES_TO_RESHARD = RegisteredStrategy(
    "refuses_to_reshard",
    refuses_to_reshard,
    RESHARDS,
    storage=OwnFormat("rank_files", reshard_refusals=(REFUSAL,)),
)
# the same strategy, its refusal undeclared: its loads that raise are its errors
UNDECLARED = RegisteredStrategy("refuses_to_reshard", refuses_to_reshard, RESHARDS, storage="rank_files")

"""A framework that builds its own optimizers and LR schedulers (own_training), over FSDP2 and
torch.distributed.checkpoint.

    pytest cases --strategy examples.own_optimizer:STRATEGY --matrix ci

writes its matrix (results.json, matrix.md, matrix.html) under reports/runs/.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.optim.lr_scheduler import LinearLR

from conformance.case import Case
from conformance.strategy import RegisteredStrategy, Supports, TrainState
from conformance.world import RankContext


class Optimizers:
    """The framework's container: one torch optimizer per param group of `like`, of its class."""

    def __init__(self, model: nn.Module, like: torch.optim.Optimizer) -> None:
        self.model = model
        self.members = [
            type(like)([{k: v for k, v in group.items() if k != "initial_lr"}]) for group in like.param_groups
        ]

    def __iter__(self) -> Iterator[torch.optim.Optimizer]:
        return iter(self.members)

    def step(self) -> None:
        for optim in self.members:
            optim.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optim in self.members:
            optim.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:  # every member's, keyed by parameter name (DSD)
        return get_optimizer_state_dict(self.model, self.members)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.model, self.members, state_dict)


class Schedulers:
    """The framework's warmup: a LinearLR per optimizer, whatever schedule the cell has."""

    def __init__(self, optimizers: Optimizers) -> None:
        self.members = [LinearLR(optim, start_factor=0.5, total_iters=4) for optim in optimizers]

    def step(self) -> None:
        for scheduler in self.members:
            scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        return {str(i): scheduler.state_dict() for i, scheduler in enumerate(self.members)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for i, scheduler in enumerate(self.members):
            scheduler.load_state_dict(state_dict[str(i)])


class OwnOptimizer:
    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:  # every method runs on every rank
        return fully_shard(model.to(ctx.device), mesh=init_device_mesh(ctx.device.type, (ctx.world_size,)))

    def own_training(self, state: TrainState, ctx: RankContext) -> TrainState:
        optimizers = Optimizers(state.model, like=state.optim)  # the cell's class and param groups
        schedulers = Schedulers(optimizers)  # trained and compared instead of the cell's own
        return TrainState(state.model, optimizers, schedulers, holders=tuple(optimizers))

    def state(self, state: TrainState) -> dict[str, Any]:
        return {
            "model": get_model_state_dict(state.model),
            "optim": state.optim.state_dict(),
            "scheduler": state.scheduler.state_dict(),
        }

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        dcp.save(self.state(state), checkpoint_id=path)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        loaded = self.state(state)
        dcp.load(loaded, checkpoint_id=path)  # in place
        set_model_state_dict(state.model, loaded["model"])
        state.optim.load_state_dict(loaded["optim"])
        state.scheduler.load_state_dict(loaded["scheduler"])


def make(case: Case) -> OwnOptimizer:  # on every rank, with the cell's Case
    return OwnOptimizer()


STRATEGY = RegisteredStrategy(
    name="own_optimizer",
    factory=make,
    supports=Supports(
        wrappers=(("fsdp2", "shard"),),
        kinds=("sharded",),
        checks=("roundtrip", "resume", "reshard", "corrupt"),
    ),
    storage="dcp",
)

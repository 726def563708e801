"""Broken variants of the DeepSpeed adapter, each one way its checkpoint or the harness's view
of its state could go wrong (module-level: the ranks import the factories by name)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from conformance.adapters.deepspeed import UNIVERSAL_TAG, DeepSpeedUniversal, DeepSpeedZero
from conformance.adapters.deepspeed_view import ZeroView
from conformance.case import Case
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext


def _view(state: TrainState) -> ZeroView:
    view = state.holders[0]
    assert isinstance(view, ZeroView)
    return view


@dataclass(frozen=True)
class LoadsModuleOnly(DeepSpeedZero):
    """load_checkpoint(load_optimizer_states=False, load_lr_scheduler_states=False): the
    weights come back, the optimizer and the scheduler keep their fresh state."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        state.engine.load_checkpoint(  # type: ignore[union-attr]
            str(path), load_optimizer_states=False, load_lr_scheduler_states=False
        )


@dataclass(frozen=True)
class BumpsAMoment(DeepSpeedZero):
    """A load after which Adam's first moment of the first param group is off by one in every
    element of this rank's flat partition: only a view that reads ZeRO's partitions sees it."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        super().load(state, path, ctx)
        view = _view(state)
        with torch.no_grad():
            for flat in view._flats(0):
                view._base.state[flat]["exp_avg"].add_(1.0)


@dataclass(frozen=True)
class BumpsTheMaster(DeepSpeedZero):
    """A load after which the fp32 master partition of the first param group is off by one while
    the model's parameters are right: a view that read the model alone would pass it."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        super().load(state, path, ctx)
        with torch.no_grad():
            for flat in _view(state)._flats(0):
                flat.add_(1.0)


@dataclass(frozen=True)
class RestartsTheLossScale(DeepSpeedZero):
    """fp16: a load after which DeepSpeed's dynamic loss scaler starts over (its initial scale, its
    growth window from step 0), as if the checkpoint had not carried it: the weights and the
    optimizer state are right, the next steps scale the loss otherwise."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        super().load(state, path, ctx)
        scaler = state.engine.optimizer.loss_scaler  # type: ignore[union-attr]
        scaler.cur_scale, scaler.cur_iter = 2.0 ** self.config()["fp16"]["initial_scale_power"], 0


@dataclass(frozen=True)
class LeavesFp16Unconfigured(DeepSpeedZero):
    """fp16: an adapter whose DeepSpeed config lacks the "fp16" section the precision asks for, so
    the engine trains the module in fp32 with no loss scaler: a cell of it would say nothing of
    fp16 or its scaler (the adapter must say the precision is not in effect, never pass)."""

    def config(self) -> dict[str, Any]:
        config = super().config()
        del config["fp16"]
        return config


@dataclass(frozen=True)
class Zero3KeepsParametersWhole(DeepSpeedZero):
    """ZeRO-3 with its default stage3_param_persistence_threshold: every parameter of a tiny
    model stays whole on every rank, so the cell would not test partitioned parameters."""

    def config(self) -> dict[str, Any]:
        config = super().config()
        config["zero_optimization"] = {"stage": self.stage}
        return config


@dataclass(frozen=True)
class UniversalKeepsTheOldLayout(DeepSpeedUniversal):
    """A universal load that only loads a checkpoint saved by as many ranks as it has (one
    optimizer file per rank) and otherwise keeps the fresh state, as if resharding were a no-op."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        if len(list((path / UNIVERSAL_TAG).glob("*optim_states.pt"))) == ctx.world_size:
            super().load(state, path, ctx)


def universal_keeps_the_old_layout(case: Case) -> DeepSpeedZero:
    return UniversalKeepsTheOldLayout(case)


def loads_module_only(case: Case) -> DeepSpeedZero:
    return LoadsModuleOnly(case)


def bumps_a_moment(case: Case) -> DeepSpeedZero:
    return BumpsAMoment(case)


def bumps_the_master(case: Case) -> DeepSpeedZero:
    return BumpsTheMaster(case)


def zero3_keeps_parameters_whole(case: Case) -> DeepSpeedZero:
    return Zero3KeepsParametersWhole(case)


def restarts_the_loss_scale(case: Case) -> DeepSpeedZero:
    return RestartsTheLossScale(case)


def leaves_fp16_unconfigured(case: Case) -> DeepSpeedZero:
    return LeavesFp16Unconfigured(case)

"""Broken variants of the DeepSpeed adapter, each one way its checkpoint or the harness's view
of its state could go wrong (module-level: the ranks import the factories by name)."""

from __future__ import annotations

from collections.abc import Callable
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


def _fresh_on_the_last_rank(state: TrainState, ctx: RankContext, load: Callable[[], None]) -> None:
    """Runs the load, then puts back on the last rank the parameters and fp32 master partitions
    it had before: under AutoTP, that rank's tensor-parallel shards stay fresh."""
    view = _view(state)
    params = [p.detach().clone() for p in state.model.parameters()]
    flats = [flat.detach().clone() for group in range(len(view.groups)) for flat in view._flats(group)]
    load()
    if ctx.rank == ctx.world_size - 1:
        with torch.no_grad():
            for param, fresh in zip(state.model.parameters(), params, strict=True):
                param.copy_(fresh)
            live = [flat for group in range(len(view.groups)) for flat in view._flats(group)]
            for flat, fresh in zip(live, flats, strict=True):
                flat.copy_(fresh)


@dataclass(frozen=True)
class LeavesOneShardFresh(DeepSpeedZero):
    """AutoTP: a load after which the last tensor-parallel rank keeps its fresh shards (its
    parameters and fp32 masters as built), the others the checkpoint's: each rank's state is
    consistent in itself; only the whole, gathered over the tensor-parallel group, is wrong."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        _fresh_on_the_last_rank(state, ctx, lambda: super(LeavesOneShardFresh, self).load(state, path, ctx))


@dataclass(frozen=True)
class UniversalLeavesOneShardFresh(DeepSpeedUniversal):
    """The universal load at another tensor-parallel size, the last rank's shards left fresh."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        _fresh_on_the_last_rank(
            state, ctx, lambda: super(UniversalLeavesOneShardFresh, self).load(state, path, ctx)
        )


@dataclass(frozen=True)
class SplitsNothing(DeepSpeedZero):
    """AutoTP configured with an autotp_size of 1 in a world of several ranks: DeepSpeed splits
    no layer and ZeRO-1 runs over every rank, which a cell would report as tensor parallelism."""

    def config(self) -> dict[str, Any]:
        config = super().config()
        config["tensor_parallel"]["autotp_size"] = 1
        return config


@dataclass(frozen=True)
class UniversalPassesAnEmptyInfo(DeepSpeedUniversal):
    """The universal save under AutoTP with the client_state the data-parallel universal row
    passes ({UNIVERSAL_CHECKPOINT_INFO: {}}): save_checkpoint lets it replace the engine's own
    record of how AutoTP split each parameter."""

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from deepspeed.checkpoint import UNIVERSAL_CHECKPOINT_INFO

        engine = state.engine
        original = engine.save_checkpoint  # type: ignore[union-attr]

        def with_info(*args: Any, **kwargs: Any) -> Any:
            return original(*args, **{**kwargs, "client_state": {UNIVERSAL_CHECKPOINT_INFO: {}}})

        engine.save_checkpoint = with_info  # type: ignore[union-attr]
        try:
            super().save(state, path, ctx)
        finally:
            del engine.save_checkpoint  # type: ignore[union-attr]


def leaves_one_shard_fresh(case: Case) -> DeepSpeedZero:
    return LeavesOneShardFresh(case)


def universal_leaves_one_shard_fresh(case: Case) -> DeepSpeedZero:
    return UniversalLeavesOneShardFresh(case)


def splits_nothing(case: Case) -> DeepSpeedZero:
    return SplitsNothing(case)


def universal_passes_an_empty_info(case: Case) -> DeepSpeedZero:
    return UniversalPassesAnEmptyInfo(case)

"""Broken variants of the checkpoint-library adapters, each one way a library's promise can be
broken (module-level: the ranks import the factories by name)."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from conformance.adapters.torch_checkpointing import TorchCheckpointing
from conformance.adapters.torchtitan import SameNames, TitanRun, Torchtitan, TrainStep, live_tensors
from conformance.case import Case
from conformance.strategy.lifecycle import Policy
from conformance.strategy.protocol import TrainState
from conformance.strategy.storage.dcp_async import tensors_in
from conformance.world import RankContext


@dataclass(frozen=True)
class StagesTheStepAfter(TorchCheckpointing):
    """An async save that captures the state after the step in flight, not the state at the
    call: the next step lands before the save stages."""

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        manager = self.manager()
        try:
            payload = self.payload(state)
            live = tensors_in(payload)
            with torch.no_grad():
                kept = [t.clone() for t in live]
                for tensor in live:
                    tensor.add_(1.0)
                manager.save(str(path), payload)
                manager.close()
                for tensor, value in zip(live, kept, strict=True):
                    tensor.copy_(value)
        finally:
            manager.close()


@dataclass(frozen=True)
class LoadsNoOptimizer(TorchCheckpointing):
    """A load whose `into=` leaves the optimizer out: 'only keys present in the template are
    loaded' (troubleshooting.md), so the optimizer keeps its fresh state."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        manager = self.manager(saving=False)
        try:
            into: dict[str, Any] = {"model": state.model.state_dict()}
            if state.scheduler is not None:
                into["scheduler"] = None
            restored = manager.load(str(path), into=into)
        finally:
            manager.close()
        if state.scheduler is not None:
            state.scheduler.load_state_dict(restored["scheduler"])


def stages_the_step_after(case: Case) -> TorchCheckpointing:
    return StagesTheStepAfter(case)


def loads_no_optimizer(case: Case) -> TorchCheckpointing:
    return LoadsNoOptimizer(case)


@dataclass(frozen=True)
class TitanStagesTheStepAfter(Torchtitan):
    """torchtitan's async save whose staging lands after the next step: the checkpoint holds
    the step after the call."""

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        step = state.scheduler.schedulers[0].last_epoch
        manager = self.manager(state, path, TrainStep(step))
        live = live_tensors(state)
        try:
            with torch.no_grad():
                kept = [t.clone() for t in live]
                for tensor in live:
                    tensor.add_(1.0)
                manager.save(step)
                manager.maybe_wait_for_saving()
                for tensor, value in zip(live, kept, strict=True):
                    tensor.copy_(value)
        finally:
            manager.close()


@dataclass(frozen=True)
class TitanExcludesTheOptimizer(Torchtitan):
    """A load with torchtitan's `exclude_from_loading=["optimizer", "lr_scheduler"]`: the
    optimizer and the scheduler keep their fresh state."""

    def config(self) -> Any:
        return dataclasses.replace(super().config(), exclude_from_loading=["optimizer", "lr_scheduler"])


@dataclass(frozen=True)
class TitanForgetsTheHolders(Torchtitan):
    """own_training without TrainState.holders: the harness could read no optimizer state."""

    def own_training(self, state: TrainState, ctx: RankContext) -> TrainState:
        owned = super().own_training(state, ctx)
        return TrainState(owned.model, owned.optim, owned.scheduler)


@dataclass(frozen=True)
class TitanKeepsTheOldLayout(Torchtitan):
    """A load that restores only a checkpoint written by as many ranks as it has (one DCP file
    per rank) and otherwise keeps the fresh state, as if resharding were a no-op."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        step_dir = max((path / "checkpoint").glob("step-*"))
        if len(list(step_dir.glob("*.distcp"))) == ctx.world_size:
            super().load(state, path, ctx)


def titan_stages_the_step_after(case: Case) -> Torchtitan:
    return TitanStagesTheStepAfter(case, async_mode="async")


def titan_excludes_the_optimizer(case: Case) -> Torchtitan:
    return TitanExcludesTheOptimizer(case)


def titan_forgets_the_holders(case: Case) -> Torchtitan:
    return TitanForgetsTheHolders(case)


def titan_keeps_the_old_layout(case: Case) -> Torchtitan:
    return TitanKeepsTheOldLayout(case)


@dataclass(frozen=True)
class SwallowsLoadErrors(TorchCheckpointing):
    """A load that catches the library's error and goes on with the fresh state, as a resume
    loop that starts from scratch on `except Exception` does."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        with contextlib.suppress(Exception):
            super().load(state, path, ctx)


@dataclass(frozen=True)
class TitanSwallowsLoadErrors(Torchtitan):
    """torchtitan's load with its error caught, the training going on from the fresh state."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        # DCP's CheckpointException is a BaseException: `except Exception` would miss it
        with contextlib.suppress(BaseException):
            super().load(state, path, ctx)


def swallows_load_errors(case: Case) -> TorchCheckpointing:
    return SwallowsLoadErrors(case)


def titan_swallows_load_errors(case: Case) -> Torchtitan:
    return TitanSwallowsLoadErrors(case)


@dataclass(frozen=True)
class ForgetsTheTie(SameNames):
    """A state-dict adapter that leaves the tied name out of the Hugging Face export, as it must,
    and never gives it back when reading one: the export holds the embedding, and the head is
    whatever its reader initialises."""

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        return dict(hf_state_dict)


@dataclass(frozen=True)
class TitanExportsWithoutTheTie(Torchtitan):
    """torchtitan's last_save_in_hf through an adapter that forgets the tie (ForgetsTheTie)."""

    def sd_adapter(self) -> Any:
        return ForgetsTheTie(super().sd_adapter().tied)


def titan_exports_without_the_tie(case: Case) -> Torchtitan:
    return TitanExportsWithoutTheTie(case)


@dataclass(frozen=True)
class TitanIgnoresTheHfExport(Torchtitan):
    """A run that drops the policy's Hugging Face export (last_save_in_hf stays False): the last
    save is torchtitan's model-only DCP folder, which holds the right values in the wrong format."""

    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> TitanRun:
        return TitanRun(self, state, path, dataclasses.replace(policy, export_hf=False))


def titan_ignores_the_hf_export(case: Case) -> Torchtitan:
    return TitanIgnoresTheHfExport(case)

"""Broken variants of the checkpoint-library adapters, each one way a library's promise can be
broken (module-level: the ranks import the factories by name)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from conformance.adapters.torch_checkpointing import TorchCheckpointing
from conformance.case import Case
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

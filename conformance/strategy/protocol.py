"""The strategy protocol and the parts the built-in strategies are composed from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from conformance.world import RankContext

StateDict = dict[str, Any]


@runtime_checkable
class Strategy(Protocol):
    """What a checkpoint strategy must do; every method runs on every rank of the world.

    The harness builds the model, calls `wrap`, builds the optimizer over the wrapped
    model's parameters, trains, calls `save`; then builds a fresh model (other weights),
    `wrap`s it, builds a fresh optimizer, calls `load`, and compares.
    """

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module: ...

    def save(self, model: nn.Module, optim: torch.optim.Optimizer, path: Path, ctx: RankContext) -> None: ...

    def load(self, model: nn.Module, optim: torch.optim.Optimizer, path: Path, ctx: RankContext) -> None: ...


class Wrapper(Protocol):
    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module: ...


class StateApi(Protocol):
    def get(self, model: nn.Module, optim: torch.optim.Optimizer) -> StateDict: ...

    def set(self, model: nn.Module, optim: torch.optim.Optimizer, state: StateDict) -> None: ...


class Storage(Protocol):
    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None: ...

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict: ...


@dataclass(frozen=True)
class ComposedStrategy:
    """A built-in strategy: wrapper x state-dict API x storage."""

    wrapper: Wrapper
    api: StateApi
    storage: Storage

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return self.wrapper.wrap(model, ctx)

    def save(self, model: nn.Module, optim: torch.optim.Optimizer, path: Path, ctx: RankContext) -> None:
        self.storage.save(self.api.get(model, optim), path, ctx)

    def load(self, model: nn.Module, optim: torch.optim.Optimizer, path: Path, ctx: RankContext) -> None:
        state = self.storage.load(path, ctx, lambda: self.api.get(model, optim))
        self.api.set(model, optim, state)

"""The strategy as a check calls it: every call into it is code under test.

An exception escaping the strategy's constructor, `wrap`, `save`, `load`, `load_before_wrap`,
`read_model_state`, `export_of`, `export_problems` or `own_training` (and the framework code they call) is the cell's `error`; anything else
that raises on a rank is the harness's (conformance.world.attribution).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from conformance.case import Case
from conformance.strategy.protocol import Strategy, TrainState
from conformance.world import RankContext
from conformance.world.attribution import code_under_test

OPTIONAL_METHODS = (
    "load_before_wrap",
    "read_model_state",
    "export_of",
    "export_problems",
    "own_training",
    "held",
    "shard_group_size",
    # the lifecycle extension (conformance.strategy.lifecycle)
    "checkpointer",
    "step_folder",
    "commit_files",
    "read_export",
)
# The calls in which the strategy reads a checkpoint: where a load that must fail must raise.
LOADING_CALLS = ("strategy.load", "strategy.load_before_wrap")


@dataclass(frozen=True)
class UnderTest:
    """A strategy whose every call runs as code under test. Has the optional methods exactly
    when the strategy has them."""

    strategy: Strategy

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        with code_under_test("strategy.wrap"):
            return self.strategy.wrap(model, ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        with code_under_test("strategy.save"):
            self.strategy.save(state, path, ctx)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        with code_under_test("strategy.load"):
            self.strategy.load(state, path, ctx)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.strategy, name) if name in OPTIONAL_METHODS else None
        if not callable(method):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with code_under_test(f"strategy.{name}"):
                return method(*args, **kwargs)

        return call


def strategy_under_test(factory: Callable[[Case], Strategy], case: Case) -> UnderTest:
    """The factory's strategy for this case (its construction is under test too)."""
    with code_under_test("the strategy's factory"):
        return UnderTest(factory(case))

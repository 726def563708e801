"""Strategies that mishandle Muon with AdamW, each the built-in strategy with one thing done wrong,
caught by the round trip (tests/test_muon.py).

drops_use_muon: a save that keeps only the hyperparameters it knows, dropping DeepSpeed's
`use_muon` flag from every param group (then restored on the live optimizer): the loaded
optimizer's groups lack it, so its next step cannot tell Muon's group from Adam's.
drops_adamw_half: a load that brings back the first of the two optimizers only: the AdamW beside
Muon keeps the fresh, empty state it was built with."""

from __future__ import annotations

from pathlib import Path

from conformance.case import Case
from conformance.layout.builtin import builtin_strategy
from conformance.strategy.protocol import Strategy, TrainState
from conformance.world import RankContext
from tests.broken import Delegating

FLAG = "use_muon"


class DropsUseMuon(Delegating):
    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        kept = [group.pop(FLAG) for group in state.optim.param_groups]
        try:
            self.base.save(state, path, ctx)
        finally:
            for group, flag in zip(state.optim.param_groups, kept):
                group[FLAG] = flag


class DropsAdamwHalf(Delegating):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.base.load(state, path, ctx)
        for optim in state.holders[1:]:
            optim.state.clear()


def drops_use_muon(case: Case) -> Strategy:
    return DropsUseMuon(builtin_strategy(case))


def drops_adamw_half(case: Case) -> Strategy:
    return DropsAdamwHalf(builtin_strategy(case))

"""Deliberately broken loads of the llama with fused projections (conformance.fused_lm), whose
checkpoint holds the split keys (w1/w3, wq/wk/wv) of its fused weights (w13, wqkv):

- swaps_gate_and_up: the fusion on load puts the up rows where the gate rows go (w3 before w1),
  as a hook with its parts in the wrong order does: every key loads, the fused w13 is wrong;
- drops_fusion_on_load: the model loads without its fusing pre-hook and with strict=False (as
  torchtitan's ModelWrapper loads): the split keys are unexpected, the fused weights missing,
  and nothing says so.

The round trip compares the live fused weights bitwise, so each must fail naming them; the
built-in strategy on the same cell passes (tests/test_fused_projection.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from conformance.case import Case
from conformance.fused_lm import GATE_UP, FusedProjection
from conformance.layout.builtin import builtin_strategy
from conformance.strategy.protocol import Strategy, TrainState
from conformance.strategy.wrappers import unwrap
from conformance.world import RankContext
from tests.broken import Delegating


def _fused(model: nn.Module) -> Iterator[FusedProjection]:
    return (m for m in unwrap(model).modules() if isinstance(m, FusedProjection))


@dataclass
class SwapsGateAndUp(Delegating):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        name, (gate, up) = GATE_UP
        swapped = [m for m in _fused(state.model) if m.fused == GATE_UP]
        for module in swapped:
            module.fused = (name, (up, gate))  # this instance's hook reads its parts in this order
        try:
            self.base.load(state, path, ctx)
        finally:
            for module in swapped:
                del module.fused  # the class's order again


@dataclass
class DropsFusionOnLoad(Delegating):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        for module in _fused(state.model):
            module._load_state_dict_pre_hooks.clear()
        root = unwrap(state.model)
        root.load_state_dict = functools.partial(type(root).load_state_dict, root, strict=False)  # type: ignore[method-assign]
        try:
            self.base.load(state, path, ctx)
        finally:
            del root.load_state_dict


def swaps_gate_and_up(case: Case) -> Strategy:
    return SwapsGateAndUp(builtin_strategy(case))


def drops_fusion_on_load(case: Case) -> Strategy:
    return DropsFusionOnLoad(builtin_strategy(case))

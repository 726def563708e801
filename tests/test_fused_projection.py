"""The llama with fused projections (conformance.fused_lm): its checkpoint is the llama's split
keys, its round trip compares the live fused weights bitwise, and a load that fuses them wrong
or not at all is caught, naming the fused weight (tests/broken_fused.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from conformance.case import Case
from conformance.fused_lm import FusedLlama
from conformance.layout.builtin import builtin_strategy
from conformance.lm import TinyLlama
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.strategy.protocol import Strategy
from conformance.world import WorldPool
from tests import broken_fused

# the plain module's state dict through one file: the hooks are the only thing between them
DDP_FULL = Case("ddp", "replicate", "sd_full", "torch_save", "adamw", "llama_fused", 2)


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def test_the_checkpoint_holds_the_llamas_split_keys_and_loads_back_bitwise() -> None:
    torch.manual_seed(0)
    fused = FusedLlama()
    saved = fused.state_dict()
    assert saved.keys() == TinyLlama().state_dict().keys()
    assert not any("wqkv" in k or "w13" in k for k in saved)
    block = fused.layers["0"]
    w13 = block.feed_forward.w13.weight.detach()
    assert torch.equal(saved["layers.0.feed_forward.w1.weight"], w13[0::2])  # gate rows
    assert torch.equal(saved["layers.0.feed_forward.w3.weight"], w13[1::2])  # up rows
    qkv = block.attention.wqkv.weight.detach().view(4, 3, 4, -1)  # [heads, q/k/v, head_dim, width]
    for i, part in enumerate(("wq", "wk", "wv")):
        assert torch.equal(saved[f"layers.0.attention.{part}.weight"], qkv[:, i].reshape(16, -1))
    torch.manual_seed(1)
    fresh = FusedLlama()
    fresh.load_state_dict(saved)
    for (name, a), (_, b) in zip(fused.named_parameters(), fresh.named_parameters(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("factory", "caught", "spared"),
    [
        (broken_fused.swaps_gate_and_up, ("feed_forward.w13.weight",), ("attention.wqkv.weight",)),
        (broken_fused.drops_fusion_on_load, ("feed_forward.w13.weight", "attention.wqkv.weight"), ()),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_a_wrong_fusion_on_load_is_caught_naming_the_fused_weight(
    pool: WorldPool,
    factory: Callable[[Case], Strategy],
    caught: tuple[str, ...],
    spared: tuple[str, ...],
) -> None:
    control = run_case(pool, DDP_FULL, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS, control.detail
    result = run_case(pool, DDP_FULL, backend="gloo", timeout_s=120, strategy_factory=factory)
    assert result.outcome is Outcome.FAIL, result.detail
    for name in caught:
        assert f"param/layers.0.{name}" in result.detail, result.detail
    for name in spared:
        assert name not in result.detail, result.detail


def test_hygiene_names_a_checkpoint_that_holds_the_live_fused_keys() -> None:
    """A checkpoint saved without the split hook holds wqkv and w13: the model's load pre-hook
    still takes them (as torchtitan's does, for back-compat), so strict=True says nothing; the
    hygiene check names the keys the model's own state dict does not have."""
    from conformance.check.hygiene import hygiene_problems

    torch.manual_seed(0)
    fused = FusedLlama()
    live = {name: p.detach().clone() for name, p in fused.named_parameters()}  # no buffers to add
    expected = {f"param/{name}": value for name, value in live.items()}
    assert hygiene_problems(fused.state_dict(), FusedLlama(), expected) == []
    problems = hygiene_problems(live, FusedLlama(), expected)
    assert len(problems) == 1 and "layers.0.attention.wqkv.weight" in problems[0], problems

"""The Megatron-core rows: a checkpoint of two pipeline stages round-trips through
dist_checkpointing (plain and fully parallel), and a load that puts the model back but not the
optimizer is caught; the Megatron-FSDP row is a skip on gloo that says why."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator

import pytest

from conformance.adapters.megatron_core import MEGATRON_DIST_CKPT, MEGATRON_DIST_CKPT_FULLY_PARALLEL
from conformance.adapters.megatron_fsdp import MEGATRON_FSDP, cpu_skip
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.strategy.registry import RegisteredStrategy
from conformance.world import WorldPool
from tests import broken_megatron_core

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("megatron") is None, reason="megatron-core is not installed"
)

CELL = "{name}-pp-sharded-megatron_torch_dist-adamw-llama-w2"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell_of(strategy: RegisteredStrategy):  # type: ignore[no-untyped-def]
    wanted = CELL.format(name=strategy.name)
    return next(c for c in CHECKS["roundtrip"].strategy_cells("default", strategy) if c.id == wanted)


@pytest.mark.parametrize(
    "strategy", [MEGATRON_DIST_CKPT, MEGATRON_DIST_CKPT_FULLY_PARALLEL], ids=lambda s: s.name
)
def test_two_stages_round_trip(pool: WorldPool, strategy: RegisteredStrategy) -> None:
    result = run_case(pool, cell_of(strategy), backend="gloo", timeout_s=180, registered=strategy)
    assert result.outcome is Outcome.PASS, result.detail


def test_a_load_that_leaves_the_optimizer_out_is_caught(pool: WorldPool) -> None:
    broken = dataclasses.replace(MEGATRON_DIST_CKPT, factory=broken_megatron_core.leaves_the_optimizer_out)
    result = run_case(pool, cell_of(MEGATRON_DIST_CKPT), backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "optim/" in result.detail, result.detail  # its step and moments, missing or fresh


def test_megatron_fsdp_skips_on_gloo_saying_why() -> None:
    cell = next(iter(CHECKS["roundtrip"].strategy_cells("default", MEGATRON_FSDP)))
    assert "torch.cuda.Stream()" in (cpu_skip(cell, "gloo") or "")
    assert cpu_skip(cell, "nccl") is None

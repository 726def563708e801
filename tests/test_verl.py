"""The verl row: a sharded checkpoint of verl's FSDPCheckpointManager round-trips under FSDP2 and
FSDP1, and a load configured to read the model alone (load_contents=["model"]) is caught."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator

import pytest

from conformance.adapters.verl import VERL_FSDP
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_verl

pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")

# with SGD, as the other rows' controls: its momentum_buffer is the optimizer state the broken
# load leaves fresh
CELL = "verl_fsdp-{wrapper}-sharded-verl_fsdp-adamw-mlp-w2"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell_of(wrapper: str):  # type: ignore[no-untyped-def]
    wanted = CELL.format(wrapper=wrapper)
    cell = next(c for c in CHECKS["roundtrip"].strategy_cells("full", VERL_FSDP) if c.id == wanted)
    return dataclasses.replace(cell, optimizer="sgd")


def test_a_checkpoint_round_trips_and_one_loaded_without_the_optimizer_is_caught(pool: WorldPool) -> None:
    cell = cell_of("fsdp2")
    control = run_case(pool, cell, backend="gloo", timeout_s=180, registered=VERL_FSDP)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(VERL_FSDP, factory=broken_verl.loads_the_model_alone)
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert any("momentum_buffer" in r.key for r in result.records), result.detail


def test_an_fsdp1_checkpoint_round_trips(pool: WorldPool) -> None:
    cell = cell_of("fsdp1_full_shard")
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=VERL_FSDP)
    assert result.outcome is Outcome.PASS, result.detail

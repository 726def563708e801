"""The NeMo Automodel row: a sharded checkpoint of its Checkpointer round-trips under FSDP2 and
DDP, and a load of the model alone (load_model without load_optimizer) is caught."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator

import pytest

from conformance.adapters.nemo_automodel import NEMO_AUTOMODEL
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_nemo_automodel

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("nemo_automodel") is None, reason="nemo-automodel is not installed"
)

# with SGD, as the other rows' controls: its momentum_buffer is the optimizer state the broken
# load leaves fresh
CELL = "nemo_automodel-{wrapper}-sharded-nemo_safetensors-adamw-mlp-w{world}"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell_of(wrapper: str, world: int):  # type: ignore[no-untyped-def]
    wanted = CELL.format(wrapper=wrapper, world=world)
    cell = next(c for c in CHECKS["roundtrip"].strategy_cells("full", NEMO_AUTOMODEL) if c.id == wanted)
    return dataclasses.replace(cell, optimizer="sgd")


def test_a_checkpoint_round_trips_and_one_loaded_without_the_optimizer_is_caught(pool: WorldPool) -> None:
    cell = cell_of("fsdp2", 2)
    control = run_case(pool, cell, backend="gloo", timeout_s=180, registered=NEMO_AUTOMODEL)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(NEMO_AUTOMODEL, factory=broken_nemo_automodel.loads_the_model_alone)
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert any("momentum_buffer" in r.key for r in result.records), result.detail


def test_a_ddp_checkpoint_round_trips(pool: WorldPool) -> None:
    cell = cell_of("ddp", 2)
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=NEMO_AUTOMODEL)
    assert result.outcome is Outcome.PASS, result.detail

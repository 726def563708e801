"""The OLMo-core rows: a sharded checkpoint round-trips under FSDP2 through its functions and its
Checkpointer, and a load that leaves the optimizer out (the API's optional `optim`) is caught."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator

import pytest

from conformance.adapters.olmo_core import OLMO_CORE_CHECKPOINTER, OLMO_CORE_FUNCTIONS
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.strategy.registry import RegisteredStrategy
from conformance.world import WorldPool
from tests import broken_olmo_core

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("olmo_core") is None, reason="ai2-olmo-core is not installed"
)

# with SGD, as the other rows' controls: its momentum_buffer is the optimizer state the broken
# load leaves fresh (AdamW passes too here: the sharded state dict keeps its betas a tuple)
CELL = "{name}-fsdp2-sharded-{storage}-adamw-mlp-w2"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell_of(strategy: RegisteredStrategy):  # type: ignore[no-untyped-def]
    wanted = CELL.format(name=strategy.name, storage=strategy.storage.name)  # type: ignore[union-attr]
    cell = next(c for c in CHECKS["roundtrip"].strategy_cells("full", strategy) if c.id == wanted)
    return dataclasses.replace(cell, optimizer="sgd")


def test_a_checkpoint_round_trips_and_one_loaded_without_the_optimizer_is_caught(pool: WorldPool) -> None:
    cell = cell_of(OLMO_CORE_FUNCTIONS)
    control = run_case(pool, cell, backend="gloo", timeout_s=180, registered=OLMO_CORE_FUNCTIONS)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(OLMO_CORE_FUNCTIONS, factory=broken_olmo_core.loads_the_model_alone)
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert any("momentum_buffer" in r.key for r in result.records), result.detail


def test_the_checkpointer_round_trips(pool: WorldPool) -> None:
    cell = cell_of(OLMO_CORE_CHECKPOINTER)
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=OLMO_CORE_CHECKPOINTER)
    assert result.outcome is Outcome.PASS, result.detail

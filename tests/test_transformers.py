"""The transformers row: a tied model exported from FSDP2 round-trips, and an export that drops the
tie is caught."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator

import pytest

from conformance.adapters.transformers import TRANSFORMERS
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_transformers

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)

# the full profile's tied cell, with SGD: AdamW's betas come back a list through
# set_optimizer_state_dict (finding dsd-full-betas-list), which would fail the control
TIED = "transformers-fsdp2-full-transformers-adamw-tied_transformer-w2"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def test_a_tied_model_exported_from_fsdp2_round_trips_and_an_untied_export_is_caught(pool: WorldPool) -> None:
    cell = next(c for c in CHECKS["roundtrip"].strategy_cells("full", TRANSFORMERS) if c.id == TIED)
    cell = dataclasses.replace(cell, optimizer="sgd")
    control = run_case(pool, cell, backend="gloo", timeout_s=180, registered=TRANSFORMERS)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(TRANSFORMERS, factory=broken_transformers.exports_untied)
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert any(r.key.startswith(("param/head.weight", "param/embed.weight")) for r in result.records), (
        result.detail
    )

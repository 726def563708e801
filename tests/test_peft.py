"""The PEFT row: a LoRA adapter round-trips under DDP, and a load that hands PEFT the PeftModel's
LoraModel (which silently loads none of the adapter's weights) is caught."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Iterator

import pytest

from conformance.adapters.peft_lora import PEFT_LORA
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_peft

pytestmark = pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")

# with SGD: AdamW's betas come back a list through set_optimizer_state_dict (finding
# dsd-full-betas-list), which would fail the control
CELL = "peft_lora-ddp-full-peft_adapter-adamw-mlp-w2"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def test_an_adapter_round_trips_and_one_loaded_into_the_lora_model_is_caught(pool: WorldPool) -> None:
    cell = next(c for c in CHECKS["roundtrip"].strategy_cells("full", PEFT_LORA) if c.id == CELL)
    cell = dataclasses.replace(cell, optimizer="sgd")
    control = run_case(pool, cell, backend="gloo", timeout_s=180, registered=PEFT_LORA)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(PEFT_LORA, factory=broken_peft.loads_into_the_lora_model)
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert any(".lora_" in r.key and r.kind == "values" for r in result.records), result.detail


def test_an_fsdp1_reshard_compares_the_adapter_s_weights_whole(pool: WorldPool) -> None:
    """The plain model has no LoRA weight: their shapes come from FSDP1's FlatParameter, so a
    reshard across world sizes (1 rank: the original shapes; 2: flat views) compares them whole
    and shows the finding peft-fsdp1-root-adapter-not-loaded alone, no shape difference."""
    cell = next(
        c
        for c in CHECKS["reshard"].strategy_cells("full", PEFT_LORA)
        if c.id == "reshard-peft_lora-fsdp1_full_shard+orig-full-peft_adapter-adamw-mlp-w2-to-w1"
    )
    result = run_case(pool, cell, backend="gloo", timeout_s=180, registered=PEFT_LORA)
    assert result.outcome is Outcome.FAIL, result.detail
    kinds = {(r.kind, ".lora_" in r.key or "betas" in r.key) for r in result.records}
    assert kinds <= {("values", True), ("type", True)}, result.detail

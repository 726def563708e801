"""The PEFT rows: a LoRA adapter round-trips under DDP, and a load that hands PEFT the PeftModel's
LoraModel (which silently loads none of the adapter's weights) is caught; a merged export of the
tied model under FSDP2 passes the hygiene check, and one that keeps the LoRA layers, merges at
twice the scaling or unties the head is caught."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Iterator

import pytest

from conformance.adapters.peft_lora import PEFT_LORA
from conformance.adapters.peft_merged import PEFT_LORA_MERGED
from conformance.case import Case
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


# The merged row's tied cell under FSDP2: the tie, the merge into it and the export's key set meet
MERGED = "hygiene-peft_lora_merged-fsdp2-full-peft_merged-adamw-tied_transformer-w2"
# its untied cell: transformers refuses to save the unmerged tied model (shared tensors under names
# its tie does not declare), so the unmerged export is shown on the MLP
MERGED_MLP = "hygiene-peft_lora_merged-fsdp2-full-peft_merged-adamw-mlp-w2"


def merged_cell(cell_id: str = MERGED) -> Case:
    return next(c for c in CHECKS["hygiene"].strategy_cells("full", PEFT_LORA_MERGED) if c.id == cell_id)


def test_a_merged_export_of_the_tied_model_is_the_plain_model_with_peft_s_merge(pool: WorldPool) -> None:
    control = run_case(pool, merged_cell(), backend="gloo", timeout_s=180, registered=PEFT_LORA_MERGED)
    assert control.outcome is Outcome.PASS, control.detail


@pytest.mark.parametrize(
    ("cell_id", "broken", "said", "unsaid"),
    [
        # the LoRA layers kept: keys of the PeftModel's, and plain names left to a fresh init
        (
            MERGED_MLP,
            broken_peft.exports_unmerged,
            ("export keys not the plain model's", ".base_layer.", "value:"),
            (),
        ),
        # the right keys and ties, the values merged at twice the scaling
        (MERGED, broken_peft.merges_twice_the_scale, ("value:",), ("export keys", "ties")),
        # every value right: the tied copy a key of its own, and the reloaded model untied
        (
            MERGED,
            broken_peft.exports_untied,
            ("export keys not the plain model's: 1", "reloaded model's ties"),
            ("value:",),
        ),
    ],
    ids=["unmerged", "twice_the_scale", "untied"],
)
def test_a_broken_merged_export_is_caught(
    pool: WorldPool,
    cell_id: str,
    broken: Callable[[Case], object],
    said: tuple[str, ...],
    unsaid: tuple[str, ...],
) -> None:
    registered = dataclasses.replace(PEFT_LORA_MERGED, factory=broken)
    result = run_case(pool, merged_cell(cell_id), backend="gloo", timeout_s=180, registered=registered)
    assert result.outcome is Outcome.FAIL, result.detail
    assert all(s in result.detail for s in said), result.detail
    assert not any(s in result.detail for s in unsaid), result.detail

"""DeepSpeed's AutoTP as layouts of the DeepSpeed rows (conformance/adapters/deepspeed_autotp.py):
its round trip and the universal checkpoint's reshard across tensor-parallel sizes pass on the
CPU, the view reads the whole state gathered over the tensor-parallel group, and each way the
checkpoint or the configuration could go wrong is caught by the cells."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from conformance.adapters import deepspeed_autotp as autotp
from conformance.adapters.deepspeed import UNIVERSAL, ZERO, installed_op
from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.layout.registry import layout_of
from conformance.matrix.rules import unsupported_reason
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.strategy.registry import RegisteredStrategy
from conformance.world import WorldPool
from tests import broken_deepspeed

needs_deepspeed = pytest.mark.skipif(
    not installed_op(),
    reason="deepspeed is not installed with its shared-memory op (python -m conformance libraries --install)",
)

ROUNDTRIP_TP4 = "deepspeed-deepspeed_autotp-sharded-deepspeed-adamw-mlp-w4"
ROUNDTRIP_2D = "deepspeed-deepspeed_autotp2_zero1-sharded-deepspeed-adamw-mlp-w4"
RESHARD = "reshard-deepspeed_universal-deepspeed_autotp-sharded-deepspeed_universal-adamw-mlp-w2-to-{m}"
# the whole state: parameters, fp32 masters and both Adam moments of mlp's 551 elements, 6 steps
WHOLE = "30 tensors (2210 elements)"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell(check: str, cell_id: str, row: RegisteredStrategy = ZERO) -> Case | Transfer:
    return next(c for c in CHECKS[check].strategy_cells("default", row) if c.id == cell_id)


def test_the_model_plan_is_autotps_layer_specs() -> None:
    """The tutorial's custom layer specs from the model's plan: fc1 column-wise, fc2 row-wise,
    autotp_size the cell's tensor-parallel degree; another layout's config has no section."""
    case = cell("roundtrip", ROUNDTRIP_2D)
    assert isinstance(case, Case)
    section = autotp.tensor_parallel_config(case)["tensor_parallel"]
    assert section["autotp_size"] == 2
    assert section["partition_config"] == {
        "use_default_specs": False,
        "layer_specs": [
            {"patterns": [r"^fc1\.weight$"], "partition_type": "column"},
            {"patterns": [r"^fc2\.weight$"], "partition_type": "row"},
        ],
    }
    assert autotp.tensor_parallel_config(dataclasses.replace(case, sharding="zero1")) == {}
    # the ranks of one tensor-parallel group train on the same batches
    assert [layout_of(case).data_rank(case, r) for r in range(4)] == [0, 0, 1, 1]


def test_a_model_without_a_plan_is_unsupported() -> None:
    cases = [c for c in CHECKS["roundtrip"].strategy_cells("default", ZERO) if c.sharding == "autotp"]
    tied = [c for c in cases if isinstance(c, Case) and c.model == "tied_transformer"]
    assert tied and all("declares no tensor-parallel plan" in (unsupported_reason(c) or "") for c in tied)


@needs_deepspeed
@pytest.mark.parametrize("cell_id", [ROUNDTRIP_TP4, ROUNDTRIP_2D])
def test_autotp_round_trips_the_whole_state(pool: WorldPool, cell_id: str) -> None:
    result = run_case(pool, cell("roundtrip", cell_id), backend="gloo", timeout_s=240, registered=ZERO)
    assert result.outcome is Outcome.PASS, result.detail
    assert WHOLE in result.detail, result.detail  # gathered over the group, not one rank's shards


@needs_deepspeed
@pytest.mark.parametrize("m", ["w1", "w4"])
def test_the_universal_checkpoint_reshards_across_tp_sizes(pool: WorldPool, m: str) -> None:
    """Saved at TP=2, converted by ds_to_universal, loaded at TP=1 and TP=4, bitwise; a load
    that leaves the last rank's shards fresh fails the same cell."""
    reshard = cell("reshard", RESHARD.format(m=m), UNIVERSAL)
    control = run_case(pool, reshard, backend="gloo", timeout_s=240, registered=UNIVERSAL)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(UNIVERSAL, factory=broken_deepspeed.universal_leaves_one_shard_fresh)
    result = run_case(pool, reshard, backend="gloo", timeout_s=240, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "values differ" in result.detail, result.detail


@needs_deepspeed
def test_a_load_that_leaves_one_tp_shard_fresh_is_caught(pool: WorldPool) -> None:
    broken = dataclasses.replace(ZERO, factory=broken_deepspeed.leaves_one_shard_fresh)
    result = run_case(
        pool, cell("roundtrip", ROUNDTRIP_TP4), backend="gloo", timeout_s=240, registered=broken
    )
    assert result.outcome is Outcome.FAIL, result.detail
    seen = [f"{r.scope}: {r.key}: {r.message}" for r in result.records]
    assert any("fc1.weight" in line for line in seen), seen


@needs_deepspeed
def test_autotp_that_splits_nothing_is_an_error_never_a_pass(pool: WorldPool) -> None:
    """AutoTP configured with an autotp_size of 1: the adapter says the plan's layers were not
    split (the sanity check would say every rank holds the whole model)."""
    broken = dataclasses.replace(ZERO, factory=broken_deepspeed.splits_nothing)
    result = run_case(pool, cell("roundtrip", ROUNDTRIP_2D), backend="gloo", timeout_s=240, registered=broken)
    assert result.outcome is Outcome.ERROR, result.detail
    assert "AutoTP did not split ^fc1\\.weight$ column-wise" in result.detail, result.detail


@needs_deepspeed
def test_the_data_parallel_universal_info_under_autotp_never_passes(pool: WorldPool) -> None:
    """save_checkpoint lets client_state={UNIVERSAL_CHECKPOINT_INFO: {}} replace AutoTP's record
    of the split: the conversion then concatenates fc2's replicated bias, and the load raises."""
    broken = dataclasses.replace(UNIVERSAL, factory=broken_deepspeed.universal_passes_an_empty_info)
    reshard = cell("reshard", RESHARD.format(m="w4"), UNIVERSAL)
    result = run_case(pool, reshard, backend="gloo", timeout_s=240, registered=broken)
    assert result.outcome is Outcome.ERROR, result.detail
    assert "full param numel" in result.detail, result.detail


def test_autotp_takes_the_default_and_full_cells_never_cis() -> None:
    """The layouts declare the matrix declarations they take (Layout.declarations): the ci
    profile, which .ci/run gates on, keeps its cells."""
    for row in (ZERO, UNIVERSAL):
        for check in row.supports.checks:
            assert not [c.id for c in CHECKS[check].strategy_cells("ci", row) if "autotp" in c.id]
    for declaration in ("default", "full"):
        reshards = CHECKS["reshard"].strategy_cells(declaration, UNIVERSAL)
        assert {c.save.sharding for c in reshards if isinstance(c, Transfer)} >= {"autotp", "autotp2_zero1"}

"""The DeepSpeed adapter as a user runs it (README: deepspeed installed with its shared-memory op
prebuilt): its ZeRO rows round-trip and resume on the CPU; each way its checkpoint or the
harness's view of its partitioned state could go wrong is caught by the check meant for it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest
import torch

from conformance.adapters.deepspeed import FP16_CPU_REASON, UNIVERSAL, ZERO, installed_op
from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_deepspeed

needs_deepspeed = pytest.mark.skipif(
    not installed_op(),
    reason="deepspeed is not installed with its shared-memory op (python -m conformance libraries --install)",
)


# DeepSpeed's fp16 mode on the CPU needs oneDNN's fp16 kernels (the adapter's skips_on): where the
# host lacks them, the fp16 cells are skips that say so (test_fp16_cells_skip_...), and the broken
# strategies of the loss scaler run on a host that has them
needs_fp16 = pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_fp16_supported(), reason=FP16_CPU_REASON)


def roundtrip(stage: str, optimizer: str = "adamw+sched", precision: str = "") -> str:
    return f"deepspeed-deepspeed_{stage}-sharded-deepspeed-{optimizer}-mlp-{precision + '-' if precision else ''}w2"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell(check: str, cell_id: str, row=ZERO) -> Case | Transfer:  # type: ignore[no-untyped-def]
    return next(c for c in CHECKS[check].strategy_cells("default", row) if c.id == cell_id)


@needs_deepspeed
@pytest.mark.parametrize("stage", ["zero1", "zero2", "zero3"])
def test_every_stage_round_trips(pool: WorldPool, stage: str) -> None:
    result = run_case(
        pool, cell("roundtrip", roundtrip(stage)), backend="gloo", timeout_s=180, registered=ZERO
    )
    assert result.outcome is Outcome.PASS, result.detail
    # the view reads the fp32 master and every moment, not the model's parameters alone
    assert "30 tensors" in result.detail, result.detail


CAUGHT = [
    ("zero2", broken_deepspeed.loads_module_only, "optim/"),
    pytest.param(
        "zero2+fp16_mp", broken_deepspeed.restarts_the_loss_scale, "scaler/cur_scale", marks=needs_fp16
    ),
    pytest.param(
        "zero3+fp16_mp", broken_deepspeed.restarts_the_loss_scale, "scaler/cur_iter", marks=needs_fp16
    ),
    ("zero2", broken_deepspeed.loads_module_only, "scheduler/"),
    ("zero1", broken_deepspeed.bumps_a_moment, "exp_avg"),
    ("zero3", broken_deepspeed.bumps_a_moment, "exp_avg"),
    ("zero1", broken_deepspeed.bumps_the_master, "fp32_master"),
    ("zero3", broken_deepspeed.bumps_the_master, "fp32_master"),
    ("zero3", broken_deepspeed.zero3_keeps_parameters_whole, "silently replicated"),
]


@needs_deepspeed
@pytest.mark.parametrize(
    ("stage", "factory", "needle"),
    CAUGHT,
    ids=[f"{c[1].__name__}-{c[0]}-{c[2]}" for c in (p.values if hasattr(p, "values") else p for p in CAUGHT)],
)
def test_the_check_catches_a_broken_variant(
    pool: WorldPool, stage: str, factory: Callable[[Case], object], needle: str
) -> None:
    stage, _, precision = stage.partition("+")
    cell_id = roundtrip(stage, "adamw", precision) if precision else roundtrip(stage)
    broken = dataclasses.replace(ZERO, factory=factory)
    result = run_case(pool, cell("roundtrip", cell_id), backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    seen = [f"{r.scope}: {r.key}: {r.message}" for r in result.records]
    assert any(needle in line for line in seen), seen


@needs_deepspeed
def test_fp16_cells_skip_where_the_cpu_has_no_fp16_kernels(pool: WorldPool) -> None:
    """A host without oneDNN fp16 kernels: DeepSpeed refuses its fp16 mode, and the cell says so
    as a skip (never an error of DeepSpeed's checkpoint); a host with them runs it."""
    result = run_case(
        pool,
        cell("roundtrip", roundtrip("zero2", "adamw", "fp16_mp")),
        backend="gloo",
        timeout_s=180,
        registered=ZERO,
    )
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():
        assert result.outcome is Outcome.PASS, result.detail
    else:
        assert (result.outcome, result.detail) == (Outcome.SKIP, FP16_CPU_REASON)


@needs_deepspeed
@needs_fp16
def test_fp16_not_in_effect_is_an_error_never_a_pass(pool: WorldPool) -> None:
    broken = dataclasses.replace(ZERO, factory=broken_deepspeed.leaves_fp16_unconfigured)
    cell_id = roundtrip("zero2", "adamw", "fp16_mp")
    result = run_case(pool, cell("roundtrip", cell_id), backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.ERROR, result.detail
    assert "fp16 mode left the module's parameters in {torch.float32}" in result.detail, result.detail


@needs_deepspeed
def test_a_universal_load_that_keeps_the_old_layout_is_caught(pool: WorldPool) -> None:
    """The universal row reshards 2 ranks into 4 (DeepSpeed's own test's pair); a load that
    keeps the fresh state when the world size changed fails the reshard check."""
    reshard = cell(
        "reshard",
        "reshard-deepspeed_universal-deepspeed_zero2-sharded-deepspeed_universal-adamw-mlp-w2-to-w4",
        UNIVERSAL,
    )
    control = run_case(pool, reshard, backend="gloo", timeout_s=180, registered=UNIVERSAL)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(UNIVERSAL, factory=broken_deepspeed.universal_keeps_the_old_layout)
    result = run_case(pool, reshard, backend="gloo", timeout_s=180, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "values differ" in result.detail or "missing" in result.detail, result.detail


def test_the_damage_goes_into_deepspeeds_data_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The corrupt check damages the torch.save files of a DeepSpeed checkpoint, never the
    zero_to_fp32.py script save_checkpoint copies beside them (larger than a tiny model's
    files: it was the largest file, and a cut script loaded 'without an error')."""
    import torch

    from conformance.adapters.deepspeed import STORAGE

    tag = tmp_path / "global_step3"
    tag.mkdir()
    (tag / "zero_to_fp32.py").write_text("#" * 100_000)
    torch.save({"module": {"w": torch.ones(64)}}, tag / "mp_rank_00_model_states.pt")
    for rank in (0, 1):
        torch.save({"state": torch.ones(8)}, tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    (tmp_path / "latest").write_text("global_step3")
    target, _, length = STORAGE.payload(tmp_path)
    assert target.name == "mp_rank_00_model_states.pt" and length == 64 * 4
    assert [p.name for p in STORAGE.rank_files(tmp_path, 1)] == ["zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert "zero_to_fp32.py" not in [p.name for p in STORAGE.data_files(tmp_path)]

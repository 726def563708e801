"""The checks meant for the newer axis values catch a strategy that mishandles them (tests/broken_axes.py),
and the same cells pass with the built-in strategy (the control)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from conformance.case import Case
from conformance.layout.builtin import builtin_strategy
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_axes

MISSING_MODULE = Case(
    "fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 2, check="template", variant="missing_module"
)
ADAFACTOR = Case("ddp", "replicate", "sd_full", "torch_save", "adafactor", "mlp", 2)
FP16_FSDP2 = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 2, "fp16_amp")
FP16_DDP = Case("ddp", "replicate", "sd_full", "torch_save", "adamw", "mlp", 2, "fp16_amp")


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def test_a_lenient_load_of_a_template_missing_a_module_is_caught(pool: WorldPool) -> None:
    control = run_case(pool, MISSING_MODULE, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS and "raised" in control.detail, control.detail
    result = run_case(
        pool, MISSING_MODULE, backend="gloo", timeout_s=120, strategy_factory=broken_axes.lenient_load
    )
    assert result.outcome is Outcome.FAIL, result.detail
    assert (
        "fc3.weight" in result.detail
        and "loaded into the model template without one module's keys" in result.detail
    )


def test_a_transposed_factored_optimizer_state_is_caught(pool: WorldPool) -> None:
    control = run_case(pool, ADAFACTOR, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS, control.detail
    result = run_case(
        pool, ADAFACTOR, backend="gloo", timeout_s=120, strategy_factory=broken_axes.transposes_factored_state
    )
    assert result.outcome is Outcome.FAIL, result.detail
    assert "row_var" in result.detail or "col_var" in result.detail, result.detail


def test_a_scheduler_with_state_of_its_own_is_restored_bitwise(pool: WorldPool) -> None:
    """Each scheduler's resume passes with the built-in strategy (what drops_scheduler in
    tests/test_broken_strategies.py breaks)."""
    for scheduler in ("onecycle", "plateau", "sequential"):
        case = dataclasses.replace(ADAFACTOR, optimizer=f"adamw+{scheduler}", check="resume")
        result = run_case(pool, case, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
        assert result.outcome is Outcome.PASS, (scheduler, result.detail)


@pytest.mark.parametrize("scheduler", ["onecycle", "cosine_restarts", "sequential", "chained", "plateau"])
def test_a_scheduler_not_restored_is_caught_for_every_scheduler(pool: WorldPool, scheduler: str) -> None:
    from tests import broken

    case = dataclasses.replace(ADAFACTOR, optimizer=f"adamw+{scheduler}")
    result = run_case(pool, case, backend="gloo", timeout_s=120, strategy_factory=broken.drops_scheduler)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "scheduler/" in result.detail, result.detail


@pytest.mark.parametrize(
    "case",
    [FP16_DDP, FP16_FSDP2, dataclasses.replace(FP16_FSDP2, precision="fp16_mp", check="resume")],
    ids=lambda c: c.id,
)
def test_a_loss_scaler_not_restored_is_caught(pool: WorldPool, case: Case) -> None:
    """A GradScaler (torch.amp's under DDP, ShardedGradScaler under FSDP) restored bitwise by the
    built-in strategy; a strategy that leaves it out of the checkpoint fails on its state."""
    control = run_case(pool, case, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS, control.detail
    result = run_case(pool, case, backend="gloo", timeout_s=120, strategy_factory=broken_axes.drops_scaler)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "scaler/" in result.detail, result.detail


def test_a_full_checkpoint_with_stale_buffers_fails_hygiene(pool: WorldPool) -> None:
    """Hygiene compares the persistent buffers the plain model loads, not only its parameters: an
    int64 step counter saved at 0 after training is caught, on the model that carries nothing else."""
    case = Case("ddp", "replicate", "sd_full", "torch_save", "adamw", "mlp_int_buffer", 2, check="hygiene")
    control = run_case(pool, case, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS, control.detail
    result = run_case(pool, case, backend="gloo", timeout_s=120, strategy_factory=broken_axes.stale_buffers)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "buffer/steps" in result.detail, result.detail


GRADS_SGD = Case("plain", "none", "sd_full", "torch_save", "sgd", "mlp", 1, "bf16_grads")


def test_a_wrapper_that_drops_grad_dtype_makes_the_cell_an_error_never_a_pass(pool: WorldPool) -> None:
    result = run_case(
        pool, GRADS_SGD, backend="gloo", timeout_s=120, strategy_factory=broken_axes.drops_grad_dtype
    )
    assert result.outcome is Outcome.ERROR, result.detail
    assert "grad_dtype not in effect" in result.detail, result.detail


FSDP2_BF16 = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 2, "bf16")


def test_a_wrapper_that_ignores_mixed_precision_makes_the_cell_an_error_never_a_pass(pool: WorldPool) -> None:
    """A bf16 cell whose wrap trains in fp32 tested nothing of bf16: the forward's dtype says so."""
    result = run_case(
        pool, FSDP2_BF16, backend="gloo", timeout_s=120, strategy_factory=broken_axes.ignores_mixed_precision
    )
    assert result.outcome is Outcome.ERROR, result.detail
    assert (
        "computed in float32, not bfloat16 (the wrapper's mixed-precision setting not in effect)"
        in result.detail
    )
    control = run_case(pool, FSDP2_BF16, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS, control.detail


def test_optimizer_state_in_the_gradient_dtype_round_trips_when_the_load_keeps_its_dtype(
    pool: WorldPool,
) -> None:
    """The built-in strategy fails there (optim-load-casts-grad-dtype-state: torch's load casts
    the bf16 momentum to fp32); casting it back after the load passes: the check compares what was
    saved, nothing stricter."""
    builtin = run_case(pool, GRADS_SGD, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert builtin.outcome is Outcome.FAIL and "momentum_buffer: dtype differs" in builtin.detail, (
        builtin.detail
    )
    kept = run_case(
        pool, GRADS_SGD, backend="gloo", timeout_s=120, strategy_factory=broken_axes.keeps_state_dtypes
    )
    assert kept.outcome is Outcome.PASS, kept.detail


GRADINIT_SGD = Case("plain", "none", "dsd_sharded_gradinit", "dcp", "sgd", "mlp", 1, "bf16_grads")


def test_the_grad_dtype_workaround_reaches_the_load_and_one_in_the_param_dtype_does_not(
    pool: WorldPool,
) -> None:
    """The workaround of dsd-init-optim-state-grad-dtype gets past get/set_state_dict's refusal to
    the load, which casts the bf16 momentum (optim-load-casts-grad-dtype-state); making the state
    with gradients in the parameter's dtype, as _init_optim_state does, is refused again: the
    cell's failure is the load's, never the workaround's own."""
    built = run_case(pool, GRADINIT_SGD, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert built.outcome is Outcome.FAIL and "momentum_buffer: dtype differs" in built.detail, built.detail
    broken = run_case(
        pool, GRADINIT_SGD, backend="gloo", timeout_s=120, strategy_factory=broken_axes.inits_in_param_dtype
    )
    assert broken.outcome is Outcome.ERROR, broken.detail
    assert "attempting to assign a gradient" in broken.detail, broken.detail

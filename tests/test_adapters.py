"""The framework adapters, as a user runs them: real outcomes with the framework installed,
explicit skips naming it without (pip install -e '.[adapters]'; .ci/run installs them)."""

from __future__ import annotations

import importlib.util

import pytest

from conformance.adapters.accelerate import ACCELERATE_FSDP
from conformance.adapters.lightning import FABRIC_FSDP, FABRIC_MODEL_PARALLEL, TRAINER_FSDP
from conformance.strategy.registry import entry_point_strategies
from tests.test_plugin import outcomes, run_cases

ADAPTERS = {s.name: s for s in (ACCELERATE_FSDP, FABRIC_FSDP, FABRIC_MODEL_PARALLEL, TRAINER_FSDP)}


def test_every_adapter_is_an_entry_point() -> None:
    points = entry_point_strategies()
    for name in ADAPTERS:
        assert name in points, f"{name} is not registered in the conformance.strategies entry points"


def test_without_the_framework_every_cell_is_a_skip_naming_it() -> None:
    for strategy in ADAPTERS.values():
        reason = strategy.skip_reason()
        installed = all(importlib.util.find_spec(d) for d in strategy.requires)
        assert (reason is None) == installed
        if reason:
            assert strategy.requires[0] in reason


@pytest.mark.skipif(
    not (importlib.util.find_spec("lightning") and importlib.util.find_spec("accelerate")),
    reason="lightning and accelerate are not installed (pip install -e '.[adapters]')",
)
def test_adapters_give_real_outcomes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """torch 2.13 CPU, what the adapters' own save and load code does: Fabric's and the
    Trainer's sharded FSDP1 and Fabric's FSDP2 round-trip; their full FSDP1 (offload_to_cpu=True,
    always) crashes as FSDP1 does; Accelerate ignores its FSDP plugin on CPU and wraps the model in DDP, which the
    sharding sanity check fails in its one witness cell; its other cells skip, saying why."""
    strategies = [arg for name in ADAPTERS for arg in ("--strategy", name)]
    code, results, log = run_cases(
        tmp_path, "--matrix", "ci", "-k", "test_roundtrip and adamw-mlp", *strategies
    )
    assert code == 1, log
    got = outcomes(results)
    assert got["lightning_fabric_fsdp-fsdp1_full_shard+orig-sharded-fabric-adamw-mlp-w2"] == "pass"
    assert got["lightning_fabric_model_parallel-fsdp2-sharded-fabric-adamw-mlp-w2"] == "pass"
    assert got["lightning_fabric_fsdp-fsdp1_full_shard+orig-full-fabric-adamw-mlp-w2"] == "crash"
    assert got["lightning_fsdp-fsdp1_full_shard+orig-sharded-trainer-adamw-mlp-w2"] == "pass"
    assert got["lightning_fsdp-fsdp1_full_shard+orig-full-trainer-adamw-mlp-w2"] == "crash"  # offload_to_cpu
    # Accelerate on the CPU: one witness cell shows the DDP fallback; every other cell is a skip
    # saying why (its FSDP code runs only on GPU-like devices)
    cell = next(
        c for c in results["cells"] if c["id"] == "accelerate_fsdp-fsdp2-full-accelerate-adamw-mlp-w2"
    )
    assert cell["outcome"] == "fail" and "the model is a DistributedDataParallel" in cell["detail"]
    other = next(
        c for c in results["cells"] if c["id"] == "accelerate_fsdp-fsdp2-sharded-accelerate-adamw-mlp-w2"
    )
    assert other["outcome"] == "skip" and "only on GPU-like devices" in other["detail"]
    frameworks = results["environment"]["variant"]["frameworks"]
    assert frameworks["lightning"] and frameworks["accelerate"]  # their versions, in the run metadata


def test_the_adapters_declare_every_fixed_model_but_named_experts_and_fused_projections() -> None:
    from conformance.adapters import ADAPTER_MODELS
    from conformance.adapters.torchtitan import SUPPORTS
    from conformance.check.fused_cells import FUSED_MODEL
    from conformance.models import MODELS

    assert set(ADAPTER_MODELS) == set(MODELS) - {"moe_named", FUSED_MODEL}
    assert FUSED_MODEL in (SUPPORTS.models or ())  # torchtitan's own pattern: its checkpointer declares it


def test_accelerate_s_cells_on_a_gpu_skip_with_the_adapter_s_own_fault() -> None:
    """On nccl every Accelerate cell, the CPU witness included, is a skip that says the adapter is
    at fault there (the first GPU run: prepare_model before the optimizer exists), never an error
    reported as Accelerate's."""
    from conformance.check.registry import CHECKS

    cells = [
        c
        for check in ACCELERATE_FSDP.supports.checks
        for c in CHECKS[check].strategy_cells("default", ACCELERATE_FSDP)
        if not ACCELERATE_FSDP.unsupported_reason(c)
    ]
    assert cells and ACCELERATE_FSDP.skips_on is not None
    for cell in cells:
        reason = ACCELERATE_FSDP.skips_on(cell, "nccl")
        assert reason and "a fault of this suite's adapter" in reason, cell.id

"""The DeepSpeed adapter as a user runs it (README: deepspeed installed with its shared-memory op
prebuilt): its ZeRO rows round-trip and resume on the CPU; each way its checkpoint or the
harness's view of its partitioned state could go wrong is caught by the check meant for it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from conformance.adapters.deepspeed import ZERO, installed_op
from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_deepspeed

pytestmark = pytest.mark.skipif(
    not installed_op(),
    reason="deepspeed is not installed with its shared-memory op (README: DS_BUILD_SHM_COMM=1 pip install "
    "--no-cache-dir --no-build-isolation deepspeed==0.19.8)",
)


def roundtrip(stage: str, optimizer: str = "adamw+sched") -> str:
    return f"deepspeed-deepspeed_{stage}-sharded-deepspeed-{optimizer}-mlp-w2"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell(check: str, cell_id: str) -> Case | Transfer:
    return next(c for c in CHECKS[check].strategy_cells("default", ZERO) if c.id == cell_id)


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
    ("zero2", broken_deepspeed.loads_module_only, "scheduler/"),
    ("zero1", broken_deepspeed.bumps_a_moment, "exp_avg"),
    ("zero3", broken_deepspeed.bumps_a_moment, "exp_avg"),
    ("zero1", broken_deepspeed.bumps_the_master, "fp32_master"),
    ("zero3", broken_deepspeed.bumps_the_master, "fp32_master"),
    ("zero3", broken_deepspeed.zero3_keeps_parameters_whole, "silently replicated"),
]


@pytest.mark.parametrize(
    ("stage", "factory", "needle"), CAUGHT, ids=[f"{c[1].__name__}-{c[0]}-{c[2]}" for c in CAUGHT]
)
def test_the_check_catches_a_broken_variant(
    pool: WorldPool, stage: str, factory: Callable[[Case], object], needle: str
) -> None:
    broken = dataclasses.replace(ZERO, factory=factory)
    result = run_case(
        pool, cell("roundtrip", roundtrip(stage)), backend="gloo", timeout_s=180, registered=broken
    )
    assert result.outcome is Outcome.FAIL, result.detail
    seen = [f"{r.scope}: {r.key}: {r.message}" for r in result.records]
    assert any(needle in line for line in seen), seen

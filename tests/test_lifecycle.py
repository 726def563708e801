"""The lifecycle check (conformance.check.lifecycle): a library that keeps its folder right
passes every scenario, and each flaw of tests/lifecycle_strategies.py fails the scenario meant
for it, with a detail that names what went wrong."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from conformance.case import Case
from conformance.check.registry import CHECKS
from conformance.check.scenarios import SCENARIOS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import lifecycle_strategies as lib

# flaw -> (the scenario that must catch it, a phrase its detail must hold)
CAUGHT_BY = {
    "deletes_latest": ("keep_latest", "step 5's folder step-5 is gone"),
    "trusts_newest": ("interrupted", "resumed, but not step 1's state"),
    "says_loaded": ("empty_folder", "says it resumed from a folder with no checkpoint"),
    "seeds_everything": ("seed_load", "resumed, but not step 2's state"),
    "exports_bf16": ("model_only_last", "is saved as torch.bfloat16"),
    "skips_unmapped": ("hf_last", "bias"),
    "purges_early": ("killed", "started fresh although step 1 had been saved"),
}


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def _cell(strategy: lib.RegisteredStrategy, scenario: str) -> Case:
    cells = CHECKS["lifecycle"].strategy_cells("ci", strategy)
    return next(c for c in cells if c.variant == scenario and not strategy.unsupported_reason(c))


def test_every_flaw_has_its_scenario() -> None:
    assert set(CAUGHT_BY) == set(lib.FLAWS)
    assert {s for s, _ in CAUGHT_BY.values()} == set(SCENARIOS)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_library_that_keeps_its_folder_right_passes(pool: WorldPool, scenario: str) -> None:
    result = run_case(
        pool, _cell(lib.FOLDERS, scenario), backend="gloo", timeout_s=120, registered=lib.FOLDERS
    )
    assert result.outcome is Outcome.PASS, result.detail


@pytest.mark.parametrize("flaw", sorted(CAUGHT_BY))
def test_each_flaw_is_caught_by_its_scenario(pool: WorldPool, flaw: str) -> None:
    scenario, phrase = CAUGHT_BY[flaw]
    broken = dataclasses.replace(lib.FOLDERS, name=flaw, factory=getattr(lib, flaw))
    result = run_case(pool, _cell(broken, scenario), backend="gloo", timeout_s=120, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert phrase in result.detail, result.detail
    assert result.observed, (
        "a failing lifecycle cell records each difference (what findings and the gate read)"
    )

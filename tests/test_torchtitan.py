"""The torchtitan adapter as a user runs it (README: torchtitan installed without its
dependencies): its rows round-trip, resume and reshard; each way its promises can be broken
is caught by the check meant for it; a strategy that owns its optimizer and does not say where
the state lives is told what to do (conformance.strategy.owned)."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Iterator

import pytest

from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_libraries

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torchtitan") is None,
    reason="torchtitan is not installed (python -m conformance libraries --install)",
)

ROUNDTRIP = "torchtitan-fsdp2-sharded-torchtitan-adamw-mlp-w2"
RESHARD = "reshard-torchtitan-fsdp2-sharded-torchtitan-adamw-mlp-w2-to-w4"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell(strategy, check: str, cell_id: str) -> Case | Transfer:  # type: ignore[no-untyped-def]
    return next(c for c in CHECKS[check].strategy_cells("default", strategy) if c.id == cell_id)


CAUGHT = [
    (
        "TORCHTITAN_ASYNC",
        "roundtrip",
        f"torchtitan_async{ROUNDTRIP.removeprefix('torchtitan')}",
        broken_libraries.titan_stages_the_step_after,
        "values differ",
    ),
    ("TORCHTITAN", "roundtrip", ROUNDTRIP, broken_libraries.titan_excludes_the_optimizer, "optim/"),
    ("TORCHTITAN", "reshard", RESHARD, broken_libraries.titan_keeps_the_old_layout, "values differ"),
    (
        "TORCHTITAN",
        "corrupt",
        f"corrupt-{ROUNDTRIP}-truncated",
        broken_libraries.titan_swallows_load_errors,
        "loaded a damaged checkpoint without an error",
    ),
]


@pytest.mark.parametrize(
    ("row_name", "check", "cell_id", "factory", "needle"), CAUGHT, ids=[c[3].__name__ for c in CAUGHT]
)
def test_the_check_catches_a_broken_variant(
    pool: WorldPool, row_name: str, check: str, cell_id: str, factory: Callable[[Case], object], needle: str
) -> None:
    from conformance.adapters import torchtitan

    row = getattr(torchtitan, row_name)
    case = cell(row, check, cell_id)
    control = run_case(pool, case, backend="gloo", timeout_s=120, registered=row)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(row, factory=factory)
    result = run_case(pool, case, backend="gloo", timeout_s=120, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert needle in result.detail, result.detail


def test_the_hugging_face_export_of_a_tied_model_must_give_back_both_names(pool: WorldPool) -> None:
    """hf_last on the tied transformer (a cell of full): torchtitan's export through an adapter
    that drops the tied name passes; one whose from_hf forgets it is caught by the strict load."""
    from conformance.adapters.torchtitan import TORCHTITAN

    case = next(
        c
        for c in CHECKS["lifecycle"].strategy_cells("full", TORCHTITAN)
        if c.model == "tied_transformer"
        and c.variant == "hf_last"
        and c.wrapper == "fsdp2"
        and not TORCHTITAN.unsupported_reason(c)  # its sharded kind
    )
    control = run_case(pool, case, backend="gloo", timeout_s=120, registered=TORCHTITAN)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(TORCHTITAN, factory=broken_libraries.titan_exports_without_the_tie)
    result = run_case(pool, case, backend="gloo", timeout_s=120, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "head.weight" in result.detail, result.detail


def test_a_run_that_ignores_the_hugging_face_export_is_an_error_never_a_pass(pool: WorldPool) -> None:
    """hf_last asks for the export in safetensors; a run that writes its usual DCP folder instead
    holds the right values, and must not pass on them."""
    from conformance.adapters.torchtitan import TORCHTITAN

    case = cell(TORCHTITAN, "lifecycle", "lifecycle-torchtitan-fsdp2-sharded-torchtitan-adamw-mlp-w2-hf_last")
    broken = dataclasses.replace(TORCHTITAN, factory=broken_libraries.titan_ignores_the_hf_export)
    result = run_case(pool, case, backend="gloo", timeout_s=120, registered=broken)
    assert result.outcome is Outcome.ERROR, result.detail
    assert "no Hugging Face export (*.safetensors)" in result.detail, result.detail


def test_a_strategy_that_owns_its_optimizer_must_name_the_holders(pool: WorldPool) -> None:
    from conformance.adapters.torchtitan import TORCHTITAN

    broken = dataclasses.replace(TORCHTITAN, factory=broken_libraries.titan_forgets_the_holders)
    result = run_case(
        pool, cell(TORCHTITAN, "roundtrip", ROUNDTRIP), backend="gloo", timeout_s=120, registered=broken
    )
    assert result.outcome is Outcome.ERROR, result.detail
    assert "holds no state" in result.detail and "TrainState.holders" in result.detail, result.detail


def test_own_training_is_told_what_to_return() -> None:
    """The contract of conformance.strategy.owned, without a world: each wrong state is named."""
    import torch
    from torch import nn

    from conformance.strategy.owned import ownership_problem
    from conformance.strategy.protocol import TrainState

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    given = TrainState(model, torch.optim.AdamW(model.parameters()))
    first, second = list(model[0].parameters()), list(model[1].parameters())
    holders = (torch.optim.AdamW(first), torch.optim.AdamW(second))
    assert ownership_problem(given, TrainState(model, holders[0], holders=holders)) == ""
    assert "TrainState" in ownership_problem(given, given.optim)
    assert "keep state.model" in ownership_problem(given, TrainState(nn.Linear(2, 2), given.optim))
    stranger = torch.optim.AdamW([*first, *second, nn.Parameter(torch.zeros(1))])
    assert "not the model's" in ownership_problem(given, TrainState(model, stranger))
    assert "twice" in ownership_problem(given, TrainState(model, holders[0], holders=(*holders, holders[0])))
    assert "TrainState.holders" in ownership_problem(
        given, TrainState(model, holders[0], holders=holders[:1])
    )

"""The Trainer's lifecycle row (conformance.adapters.lightning_trainer): every scenario it
declares passes, and each mistake of tests/broken_lightning_trainer.py is caught by the scenario
meant for it."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from conformance.case import Case
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.strategy.registry import RegisteredStrategy
from conformance.world import WorldPool

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None,
    reason="lightning is not installed (pip install -e '.[adapters]')",
)

# flaw -> (scenario, outcome, a phrase of its detail)
CAUGHT_BY = {
    "keeps_oldest": ("keep_latest", Outcome.FAIL, "step 5's folder step=5.ckpt is gone"),
    "no_last": ("interrupted", Outcome.FAIL, "started fresh although step 1 had been saved"),
    "every_other_step": ("interrupted", Outcome.FAIL, "step 1's folder step=1.ckpt is gone"),
    "hooks_every_other_step": ("interrupted", Outcome.ERROR, "checkpointed after steps [2], not [1, 2]"),
    "removes_last_first": ("killed", Outcome.FAIL, "started fresh although step 1 had been saved"),
}


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def _cell(strategy: RegisteredStrategy, scenario: str, model: str = "mlp") -> Case:
    cells = CHECKS["lifecycle"].strategy_cells("default", strategy)
    return next(
        c for c in cells if c.variant == scenario and c.model == model and not strategy.unsupported_reason(c)
    )


def _rows() -> dict[str, RegisteredStrategy]:
    from conformance.adapters.lightning_trainer import TRAINER_DDP
    from conformance.adapters.lightning_trainer_async import TRAINER_DDP_ASYNC
    from conformance.adapters.lightning_trainer_slow_disk import TRAINER_SLOW_DISK

    return {row.name: row for row in (TRAINER_DDP, TRAINER_DDP_ASYNC, TRAINER_SLOW_DISK)}


def _declared() -> list[tuple[str, str, str]]:
    return sorted(
        {
            (name, c.variant, c.model)
            for name, row in _rows().items()
            for c in CHECKS["lifecycle"].strategy_cells("default", row)
            if not row.unsupported_reason(c)
        }
    )


@pytest.mark.parametrize(
    ("row", "scenario", "model"), _declared() if importlib.util.find_spec("lightning") else []
)
def test_every_declared_scenario_passes(pool: WorldPool, row: str, scenario: str, model: str) -> None:
    strategy = _rows()[row]
    result = run_case(
        pool, _cell(strategy, scenario, model), backend="gloo", timeout_s=120, registered=strategy
    )
    assert result.outcome is Outcome.PASS, result.detail


@pytest.mark.parametrize("flaw", sorted(CAUGHT_BY))
def test_each_mistake_is_caught(pool: WorldPool, flaw: str) -> None:
    from tests.broken_lightning_trainer import FLAWS, flawed

    assert set(FLAWS) == set(CAUGHT_BY)
    scenario, outcome, phrase = CAUGHT_BY[flaw]
    broken = flawed(flaw)
    result = run_case(pool, _cell(broken, scenario), backend="gloo", timeout_s=120, registered=broken)
    assert result.outcome is outcome, result.detail
    assert phrase in result.detail, result.detail


def test_a_link_to_a_checkpoint_not_yet_written_loses_the_run_when_the_kill_meets_it(pool: WorldPool) -> None:
    """lightning-async-link-last-before-write: on the slowed disk the kill meets step 2's write
    (the control row above resumes step 1); with save_last="link" the restart starts fresh."""
    from conformance.adapters.lightning_trainer_slow_disk import TRAINER_SLOW_DISK_LINK

    cell = _cell(TRAINER_SLOW_DISK_LINK, "killed")
    result = run_case(pool, cell, backend="gloo", timeout_s=120, registered=TRAINER_SLOW_DISK_LINK)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "started fresh although step 1 had been saved" in result.detail, result.detail
    assert "the kill met its write in flight" in result.detail, result.detail
    # the scenario's own kill is not among the cell's differences: only the lost run is
    assert [o["kind"] for o in result.observed] == ["problem"], result.observed


def test_the_slowed_disk_makes_the_kill_meet_the_write_and_the_copy_resumes_the_step_before(
    pool: WorldPool,
) -> None:
    """The control of the link row: its pass must come from a kill that met step 2's write (else
    the slowing did nothing and the pass would say nothing of a write cut off)."""
    from conformance.adapters.lightning_trainer_slow_disk import TRAINER_SLOW_DISK

    cell = _cell(TRAINER_SLOW_DISK, "killed")
    result = run_case(pool, cell, backend="gloo", timeout_s=120, registered=TRAINER_SLOW_DISK)
    assert result.outcome is Outcome.PASS, result.detail
    assert "resumed step 1" in result.detail, result.detail
    assert "the kill met its write in flight" in result.detail, result.detail

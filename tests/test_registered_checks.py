"""A registered strategy gets every check it declares, and each check catches a registered
strategy broken the way it is meant to catch; the same cells pass with the unbroken one."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.strategy.registry import RegisteredStrategy
from conformance.world import WorldPool
from tests import broken


def registered(name: str, factory: Callable[[Case], object]) -> RegisteredStrategy:
    return RegisteredStrategy(name, factory, broken.EVERY_CHECK, storage="dcp")  # type: ignore[arg-type]


CONTROL = registered("every", broken.every_check_control)


def cell_of(check: str, pick: Callable[[Case | Transfer], bool]) -> Case | Transfer:
    """The registered strategy's first declared cell of the check in the ci profile that `pick`
    takes: the cells come from the registry, as in a run."""
    cells = [c for c in CHECKS[check].strategy_cells("ci", CONTROL) if not CONTROL.unsupported_reason(c)]
    return next(c for c in cells if pick(c))


def _sharded(c: Case | Transfer) -> bool:
    """The sharded kind, the mlp model: cells no finding of torch's own touches."""
    return c.kind == "sharded" and c.axes()["model"] == "mlp"


# (check, which of its cells, the broken factory, needles in the detail)
CAUGHT = [
    ("roundtrip", _sharded, broken.every_check_no_op_load, ["values differ"]),
    ("resume", _sharded, broken.every_check_stale_gradients, ["loss", "after the resume"]),
    (
        "reshard",
        lambda c: _sharded(c) and c.save.world_size == 1 and c.load.world_size == 2,  # type: ignore[union-attr]
        broken.every_check_skips_other_sizes,
        ["values differ"],
    ),
    (
        "relayout",
        lambda c: c.kind == "sharded",
        broken.every_check_skips_other_layouts,
        ["values differ"],
    ),
    (
        "interop",
        lambda c: _sharded(c) and c.save.strategy == "every" and not c.load.strategy,  # type: ignore[union-attr]
        broken.every_check_negates,
        ["values differ", "saved by every-fsdp2-sharded-dcp", "loaded by ddp-dsd_sharded-dcp"],
    ),
    (
        "hygiene",
        lambda c: _sharded(c) and c.precision == "fp32",
        broken.every_check_prefixes,
        ["wrapper prefix", "module."],
    ),
    (
        "corrupt",
        lambda c: _sharded(c) and c.variant == "truncated",  # type: ignore[union-attr]
        broken.every_check_swallows,
        ["loaded a damaged checkpoint without an error"],
    ),
]


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def test_every_check_offered_to_registered_strategies_is_tested_here() -> None:
    """Every check but those that need an extension of the protocol (Check.needs), whose broken
    strategies have tests of their own (the lifecycle check: tests/test_lifecycle.py)."""
    plain = sorted(n for n, c in CHECKS.items() if c.registered and not c.needs)
    assert sorted(check for check, *_ in CAUGHT) == plain
    assert [n for n, c in CHECKS.items() if c.needs] == ["lifecycle"]


def test_the_example_declares_every_check_it_can() -> None:
    from examples.my_strategy import STRATEGY, Fsdp2Dcp

    can = sorted(n for n, c in CHECKS.items() if c.registered and not c.lacks(Fsdp2Dcp))
    assert sorted(STRATEGY.supports.checks) == can


@pytest.mark.parametrize(
    ("check", "pick", "factory", "needles"), CAUGHT, ids=[f"{c}-{f.__name__}" for c, _, f, _ in CAUGHT]
)
def test_each_check_catches_a_broken_registered_strategy(
    pool: WorldPool,
    check: str,
    pick: Callable[[Case | Transfer], bool],
    factory: Callable[[Case], object],
    needles: list[str],
) -> None:
    cell = cell_of(check, pick)
    control = run_case(pool, cell, backend="gloo", timeout_s=90, registered=CONTROL)
    assert control.outcome is Outcome.PASS, f"{cell.id}: the control fails:\n{control.detail}"
    result = run_case(pool, cell, backend="gloo", timeout_s=90, registered=registered("every", factory))
    assert result.outcome is Outcome.FAIL, f"{cell.id}:\n{result.detail}"
    for needle in needles:
        assert needle in result.detail, f"{needle!r} not in:\n{result.detail}"


def test_a_registered_strategy_gets_properties_where_it_takes_generated_models() -> None:
    import dataclasses

    from conformance.property import properties
    from conformance.strategy.registry import Registry

    every = Registry(builtin=False, strategies={"every": CONTROL})
    ids = [p.id for p in properties("ci", every)]
    assert ids == [
        "property-reshard-every-fsdp2-full-dcp-w1-to-w2",
        "property-reshard-every-fsdp2-full-dcp-w2-to-w1",
        "property-reshard-every-fsdp2-sharded-dcp-w1-to-w2",
        "property-reshard-every-fsdp2-sharded-dcp-w2-to-w1",
        "property-resume-every-fsdp2-full-dcp-w2",
        "property-resume-every-fsdp2-sharded-dcp-w2",
        "property-roundtrip-every-fsdp2-full-dcp-w2",
        "property-roundtrip-every-fsdp2-sharded-dcp-w2",
    ]
    fixed_models = dataclasses.replace(
        CONTROL, supports=dataclasses.replace(CONTROL.supports, models=("mlp",))
    )
    assert properties("ci", Registry(builtin=False, strategies={"every": fixed_models})) == []

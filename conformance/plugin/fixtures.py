"""The worlds and the fixtures that run a cell or a property and turn its outcome into pytest's."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import pytest
import torch

from conformance.baseline import Baseline, judge
from conformance.case import Case, Transfer
from conformance.check.phases import SharedSaves
from conformance.check.roundtrip import StrategyFactory
from conformance.findings import attribute, load_findings
from conformance.layout.builtin import builtin_strategy
from conformance.outcome import FAILING, CellResult, Outcome, first_line
from conformance.plugin.collection import cell_of
from conformance.plugin.shared import BACKEND_KEY, BASELINE_KEY, PROPERTY, REGISTRY_KEY, WORLDS_KEY
from conformance.property import Property, run_property
from conformance.runner import cell_backend, harness_error, rank_preload, run_case
from conformance.world import WorldPool
from conformance.world.devices import visible_gpus


@pytest.fixture(scope="session")
def world_pool(request: pytest.FixtureRequest) -> Iterator[WorldPool]:
    """The worlds of this pytest process; their template imports the frameworks of the
    registered strategies whose cells the run selected."""
    pytestconfig = request.config
    selected = [c for c in map(cell_of, request.session.items) if c is not None]
    with WorldPool(
        start_timeout_s=pytestconfig.getoption("world_start_timeout"),
        fresh=pytestconfig.getoption("fresh_worlds"),
        spawn=pytestconfig.getoption("spawn_worlds"),
        preload=rank_preload(),
        warm=pytestconfig.stash[REGISTRY_KEY].imports_of(selected),
    ) as pool:
        yield pool
        pytestconfig.stash[WORLDS_KEY] = pool.started


@pytest.fixture(scope="session")
def shared_saves(request: pytest.FixtureRequest, world_pool: WorldPool) -> SharedSaves | None:
    """The saves the cells of this process share (conformance.check.phases.SharedSaves); with
    --fresh-worlds none: every cell alone, the reference the warm run must agree with."""
    return None if request.config.getoption("fresh_worlds") else SharedSaves(world_pool.root)


@pytest.fixture(scope="session")
def conformance_backend(pytestconfig: pytest.Config) -> str:
    return pytestconfig.stash[BACKEND_KEY]


@pytest.fixture
def conformance_cell(
    request: pytest.FixtureRequest,
    world_pool: WorldPool,
    conformance_backend: str,
    shared_saves: SharedSaves | None,
) -> Callable[..., CellResult]:
    """Run a case, record its result for the reports, and turn its outcome into pytest's."""

    def run(case: Case | Transfer, strategy_factory: StrategyFactory = builtin_strategy) -> CellResult:
        registry = request.config.stash[REGISTRY_KEY]
        backend = cell_backend(conformance_backend, case, len(visible_gpus()))
        result = run_case(
            world_pool,
            case,
            backend=backend,
            timeout_s=request.config.getoption("case_timeout"),
            strategy_factory=strategy_factory,
            registered=registry.strategy_of(case),
            shared=shared_saves,
        )
        request.node.user_properties.append((PROPERTY, result.to_json()))
        _to_pytest(
            result, request.config.stash[BASELINE_KEY], backend, request.config.getoption("verbose") > 0
        )
        return result

    return run


@pytest.fixture
def conformance_property(
    request: pytest.FixtureRequest,
    world_pool: WorldPool,
    conformance_backend: str,
    shared_saves: SharedSaves | None,
) -> Callable[[Property], CellResult]:
    """Run a property (its examples as cells in the warm worlds), record its one result (the
    shrunk minimal failing configuration, or how many examples passed), and turn its outcome
    into pytest's, as for a cell."""
    timeout_s = request.config.getoption("case_timeout")

    def run(prop: Property) -> CellResult:
        registry = request.config.stash[REGISTRY_KEY]

        gpus = len(visible_gpus())
        backend = cell_backend(conformance_backend, prop.base, gpus)

        def cell(example: Case | Transfer) -> CellResult:
            return run_case(
                world_pool,
                example,
                backend=cell_backend(conformance_backend, example, gpus),
                timeout_s=timeout_s,
                registered=registry.strategy_of(example),
                shared=shared_saves,
            )

        try:
            result = run_property(prop, cell, backend)
        except Exception:  # a fault of the harness is the property's error, never a lost cell
            result = harness_error(prop.id, prop.axes(backend), 0.0)
        request.node.user_properties.append((PROPERTY, result.to_json()))
        _to_pytest(
            result, request.config.stash[BASELINE_KEY], backend, request.config.getoption("verbose") > 0
        )
        return result

    return run


def _to_pytest(result: CellResult, baseline: Baseline | None, backend: str, verbose: bool = False) -> None:
    """The cell's outcome as pytest's. With a baseline, the gate decides (baseline.judge):
    known failures are xfails, regressions and new failures fail, stale entries warn."""
    if baseline is not None:
        verdict = judge(result, baseline.expected(result.id, torch.__version__, backend), baseline.findings)
        if verdict.kind == "known":
            pytest.xfail(verdict.message)
        if verdict.kind == "stale":
            warnings.warn(verdict.message, stacklevel=1)
        if verdict.fails_the_gate:
            pytest.fail(_said(result, verdict.message, baseline, verbose), pytrace=False)
    if result.outcome in (Outcome.SKIP, Outcome.UNSUPPORTED):
        pytest.skip(f"{result.outcome.value}: {result.detail}")
    if result.outcome in FAILING:
        pytest.fail(_said(result, result.outcome.value, baseline, verbose), pytrace=False)


def _said(result: CellResult, message: str, baseline: Baseline | None, verbose: bool) -> str:
    """What the terminal says of a failing cell: one line, its reason and the findings that
    explain it; under -v its whole detail (which the reports always keep)."""
    if verbose:
        return f"{message}: {result.detail}"
    findings = baseline.findings if baseline is not None else load_findings()
    explained = [f.id for f in attribute(result, list(findings)).findings]
    why = f"[{', '.join(explained)}]" if explained else "[no finding explains it]"
    return f"{message}: {first_line(result.detail)} {why} (whole detail: -v, or matrix.html)"

"""The pytest plugin: options, markers, the matrix parameters, the worlds, and the reports.

Registered through the `pytest11` entry point, and by the checkout's conftest.py. Results
travel from xdist workers to the controller on each report's user_properties (plain built-in
types only) and are written once, by the controller, at the end of the session.
"""

from __future__ import annotations

import os
import re
import signal
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conformance._rank_entry import die_with_parent
from conformance.baseline import Baseline, judge, load_baseline, render_baseline
from conformance.case import API_KINDS, Case, Transfer
from conformance.check.roundtrip import StrategyFactory
from conformance.matrix import CHECKS, PROFILES, run_cells
from conformance.outcome import FAILING, CellResult, Outcome
from conformance.property import Property, properties, run_property
from conformance.report.environment import environment
from conformance.report.write import outcome_summary, rerun_summary, write_reports
from conformance.runner import RANK_PRELOAD, harness_error, resolve_backend, run_case
from conformance.strategy.builtin import STATE_APIS, builtin_strategy
from conformance.strategy.registry import Registry, build_registry
from conformance.world import WorldPool
from conformance.world.devices import visible_gpus, worker_gpus, xdist_worker

PROPERTY = "conformance_cell"
BASELINE_KEY = pytest.StashKey[Baseline | None]()
BACKEND_KEY = pytest.StashKey[str]()
WORLDS_KEY = pytest.StashKey[int]()  # worlds this process started
REGISTRY_KEY = pytest.StashKey[Registry]()
KIND_MARKERS = sorted(set(API_KINDS.values()))
WRAPPER_MARKERS = sorted(STATE_APIS)  # the wrapper families


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "checkpoint conformance matrix")
    group.addoption(
        "--matrix",
        default="default",
        choices=sorted(PROFILES),
        help="matrix profile: " + "; ".join(f"{p.name}: {p.description}" for p in PROFILES.values()),
    )
    group.addoption(
        "--case-timeout",
        type=float,
        default=60.0,
        help="seconds before a cell is a hang (default 60)",
    )
    group.addoption(
        "--backend",
        default="auto",
        choices=["auto", "gloo", "nccl"],
        help="process-group backend; auto: nccl where CUDA is available, else gloo",
    )
    group.addoption(
        "--report-dir",
        default=None,
        help="where results.json and matrix.md go (default: reports/runs/<torch>-<backend>-<matrix>)",
    )
    group.addoption("--baseline", default=None, help="TOML file of known outcomes per cell id")
    group.addoption(
        "--update-baseline",
        action="store_true",
        help="write the --baseline file from this run (every cell that did not pass) instead of gating on it",
    )
    group.addoption("--world-start-timeout", type=float, default=120.0, help="seconds for a world to start")
    group.addoption(
        "--fresh-worlds",
        action="store_true",
        help="run every cell (every phase of a check) in a world of its own instead of warm worlds: "
        "slower; outcomes must be the same either way",
    )
    group.addoption(
        "--strategy",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="run this registered strategy's cells (a RegisteredStrategy: package.module:ATTR, or the "
        "name of a 'conformance.strategies' entry point); repeatable; then only the strategies named "
        "run ('builtin': the built-in matrix). Default: the built-in matrix and every entry point",
    )


CI_PHASES = ("explicit", "reuse", "generate")
# Properties' hypothesis profiles (--hypothesis-profile; ci when none is given, so that a
# matrix run and its published results are the same every time). ci: derandomized, no example
# database (a replayed failure from an earlier run would change what CI sees); dev and
# thorough: random, with the database in .hypothesis/ of the working directory, as hypothesis
# keeps it, so a failure found once is tried first the next time.
HYPOTHESIS_PROFILES: dict[str, dict[str, Any]] = {
    # no shrinking in ci: a failing property would run a hundred more cells, and a crashing
    # one restart a world for each (minutes per property); dev and thorough shrink
    "ci": {"derandomize": True, "max_examples": 10, "database": None, "phases": CI_PHASES},
    "dev": {"max_examples": 25},
    "thorough": {"max_examples": 100},
}
DEFAULT_HYPOTHESIS_PROFILE = "ci"


@pytest.hookimpl(tryfirst=True)  # before hypothesis's own plugin reads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    from hypothesis import Phase, settings

    for name, kwargs in HYPOTHESIS_PROFILES.items():
        if "phases" in kwargs:
            kwargs = {**kwargs, "phases": [Phase[p] for p in kwargs["phases"]]}
        settings.register_profile(name, deadline=None, print_blob=True, **kwargs)
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile(DEFAULT_HYPOTHESIS_PROFILE)
    for kind in KIND_MARKERS:
        config.addinivalue_line("markers", f"{kind}: cells whose checkpoint holds {kind} state dicts")
    for wrapper in WRAPPER_MARKERS:
        config.addinivalue_line("markers", f"{wrapper}: cells that wrap the model with {wrapper}")
    for check in CHECKS:
        config.addinivalue_line("markers", f"{check}: cells of the {check} check")
    config.addinivalue_line(
        "markers", "property: hypothesis-generated models and schedules (cases/test_property.py)"
    )
    if config.getoption("case_timeout") <= 0:
        raise pytest.UsageError("--case-timeout must be a positive number of seconds")
    # The backend from every GPU of the machine, then this xdist worker's share of them: every
    # worker runs the same backend, and its worlds see only its own GPUs.
    config.stash[BACKEND_KEY] = resolve_backend(config.getoption("backend"))
    if hasattr(config, "workerinput"):
        die_with_parent(os.getppid(), signal.SIGTERM)  # a killed controller takes its workers along
        gpus = visible_gpus()
        if gpus:
            mine = worker_gpus(gpus, *xdist_worker(config.workerinput))
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine) if mine else "-1"
    try:
        config.stash[REGISTRY_KEY] = build_registry(config.getoption("strategy"))
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(ResultCollector(config), "conformance-results")
    baseline = config.getoption("baseline")
    if config.getoption("update_baseline") and not baseline:
        raise pytest.UsageError("--update-baseline needs --baseline FILE: the file to write")
    try:
        gate = baseline and not config.getoption("update_baseline")
        config.stash[BASELINE_KEY] = load_baseline(Path(baseline)) if gate else None
    except (FileNotFoundError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None


# fixture name -> the check whose cells it takes, one test per cell of the --matrix profile
CELL_FIXTURES = {"matrix_case": "roundtrip", **{f"{check}_case": check for check in CHECKS}}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, check in CELL_FIXTURES.items():
        if fixture not in metafunc.fixturenames:
            continue
        params = [
            pytest.param(
                cell,
                id=cell.id,
                marks=[getattr(pytest.mark, m) for m in (cell.kind, cell.family, check)],
            )
            for cell in run_cells(
                metafunc.config.stash[REGISTRY_KEY], metafunc.config.getoption("matrix"), check
            )
        ]
        metafunc.parametrize(fixture, params)
    if "property_case" in metafunc.fixturenames:
        registry = metafunc.config.stash[REGISTRY_KEY]
        props = properties(metafunc.config.getoption("matrix")) if registry.builtin else []
        metafunc.parametrize(
            "property_case",
            [
                pytest.param(
                    p,
                    id=p.id,
                    marks=[
                        pytest.mark.property,
                        getattr(pytest.mark, p.base.kind),
                        getattr(pytest.mark, p.base.family),
                    ],
                )
                for p in props
            ],
        )


@pytest.fixture(scope="session")
def world_pool(pytestconfig: pytest.Config) -> Iterator[WorldPool]:
    with WorldPool(
        start_timeout_s=pytestconfig.getoption("world_start_timeout"),
        fresh=pytestconfig.getoption("fresh_worlds"),
        preload=RANK_PRELOAD,
    ) as pool:
        yield pool
        pytestconfig.stash[WORLDS_KEY] = pool.started


WORKER_GROUP_CELLS = 48  # cells of one world-size group an xdist worker takes at a time


def world_group(cell: Case | Transfer) -> str:
    """The worlds a cell needs, as a word: w2, or w1+w2 for a reshard between 1 and 2 ranks."""
    if isinstance(cell, Transfer):
        return "+".join(f"w{n}" for n in sorted({cell.save.world_size, cell.load.world_size}))
    return f"w{cell.world_size}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the cells by the worlds they need, in runs of WORKER_GROUP_CELLS: under
    `--dist loadgroup` each run goes to one xdist worker, so a worker starts the worlds of the
    groups it gets rather than every world of the matrix. xdist's default (`load`) ignores
    the groups; bench/xdist.py measures both."""
    counts: dict[str, int] = {}
    for item in items:
        cell = _cell_of(item)
        if cell is None:
            continue
        group = world_group(cell)
        index = counts.get(group, 0)
        counts[group] = index + 1
        item.add_marker(pytest.mark.xdist_group(f"{group}-{index // WORKER_GROUP_CELLS}"))


def _cell_of(item: pytest.Item) -> Case | Transfer | None:
    params = getattr(getattr(item, "callspec", None), "params", {})
    cell = next((params[f] for f in CELL_FIXTURES if f in params), None)
    return cell if isinstance(cell, (Case, Transfer)) else None  # an empty parameter set: NOTSET


@pytest.fixture(scope="session")
def conformance_backend(pytestconfig: pytest.Config) -> str:
    return pytestconfig.stash[BACKEND_KEY]


@pytest.fixture
def conformance_cell(
    request: pytest.FixtureRequest, world_pool: WorldPool, conformance_backend: str
) -> Callable[..., CellResult]:
    """Run a case, record its result for the reports, and turn its outcome into pytest's."""

    def run(case: Case | Transfer, strategy_factory: StrategyFactory = builtin_strategy) -> CellResult:
        registry = request.config.stash[REGISTRY_KEY]
        result = run_case(
            world_pool,
            case,
            backend=conformance_backend,
            timeout_s=request.config.getoption("case_timeout"),
            strategy_factory=strategy_factory,
            registered=registry.strategy_of(case),
        )
        request.node.user_properties.append((PROPERTY, result.to_json()))
        _to_pytest(result, request.config.stash[BASELINE_KEY], conformance_backend)
        return result

    return run


@pytest.fixture
def conformance_property(
    request: pytest.FixtureRequest, world_pool: WorldPool, conformance_backend: str
) -> Callable[[Property], CellResult]:
    """Run a property (its examples as cells in the warm worlds), record its one result (the
    shrunk minimal failing configuration, or how many examples passed), and turn its outcome
    into pytest's, as for a cell."""
    timeout_s = request.config.getoption("case_timeout")

    def run(prop: Property) -> CellResult:
        def cell(example: Case | Transfer) -> CellResult:
            return run_case(world_pool, example, backend=conformance_backend, timeout_s=timeout_s)

        try:
            result = run_property(prop, cell, conformance_backend)
        except Exception:  # a fault of the harness is the property's error, never a lost cell
            result = harness_error(prop.id, prop.axes(conformance_backend), 0.0)
        request.node.user_properties.append((PROPERTY, result.to_json()))
        _to_pytest(result, request.config.stash[BASELINE_KEY], conformance_backend)
        return result

    return run


def _to_pytest(result: CellResult, baseline: Baseline | None, backend: str) -> None:
    """The cell's outcome as pytest's. With a baseline, the gate decides (baseline.judge):
    known failures are xfails, regressions and new failures fail, stale entries warn."""
    if baseline is not None:
        verdict = judge(result, baseline.expected(result.id, torch.__version__, backend))
        if verdict.kind == "known":
            pytest.xfail(verdict.message)
        if verdict.kind == "stale":
            warnings.warn(verdict.message, stacklevel=1)
        if verdict.fails_the_gate:
            pytest.fail(f"{verdict.message}: {result.detail}", pytrace=False)
    if result.outcome in (Outcome.SKIP, Outcome.UNSUPPORTED):
        pytest.skip(f"{result.outcome.value}: {result.detail}")
    if result.outcome in FAILING:
        pytest.fail(f"{result.outcome.value}: {result.detail}", pytrace=False)


def _hypothesis_settings(config: pytest.Config) -> dict[str, Any]:
    from hypothesis import settings

    current = settings()
    return {
        "profile": config.getoption("hypothesis_profile", None) or DEFAULT_HYPOTHESIS_PROFILE,
        "seed": config.getoption("hypothesis_seed", None),
        "derandomize": current.derandomize,
        "max_examples": current.max_examples,
    }


def profile_cell_ids(profile: str, registry: Registry | None = None) -> set[str]:
    """Every cell id the run has, over every check and property (what a baseline of it
    should cover)."""
    registry = registry or Registry()
    cells = {cell.id for check in CHECKS for cell in run_cells(registry, profile, check)}
    return cells | ({p.id for p in properties(profile)} if registry.builtin else set())


class ResultCollector:
    """Gathers every cell's result (on the controller under xdist) and writes the reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[CellResult] = []
        self.out: Path | None = None
        self.gate_lines: list[str] = []  # what the gate says at the end: disappeared, unmatched
        self.worlds: dict[str, int] = {}  # process (xdist worker id, or "main") -> worlds it started

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """An xdist worker finished: how many worlds it started."""
        self.worlds[node.gateway.id] = int(node.workeroutput.get("conformance_worlds", 0))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == PROPERTY and report.when == "call":
                self.results.append(CellResult.from_json(value))

    def report_dir(self, backend: str) -> Path:
        option = self.config.getoption("report_dir")
        if option:
            return Path(option)
        name = f"torch-{torch.__version__}-{backend}-{self.config.getoption('matrix')}"
        return Path(self.config.rootpath) / "reports" / "runs" / re.sub(r"[^A-Za-z0-9._-]", "_", name)

    def _check_entries(self, session: pytest.Session, baseline: Baseline, backend: str) -> None:
        """Entries the run cannot have seen. Of the baseline's own profile: the matrix lost the
        cell (it disappeared): the gate fails. Of another profile: a warning."""
        profile = self.config.getoption("matrix")
        known = profile_cell_ids(profile, self.config.stash[REGISTRY_KEY])
        missing = sorted(
            cell_id
            for cell_id, entry in baseline.entries.items()
            if cell_id not in known and entry.applies(torch.__version__, backend)
        )
        if not missing:
            return
        if baseline.profile == profile:
            self.gate_lines.append(
                f"GATE: {len(missing)} cells of the baseline are gone from the {profile} matrix: "
                + ", ".join(missing[:10])
                + (" ..." if len(missing) > 10 else "")
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            self.gate_lines.append(
                f"warning: {len(missing)} baseline entries match no cell of the {profile} matrix "
                f"(the baseline is for {baseline.profile or 'no named profile'}): " + ", ".join(missing[:5])
            )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        started = self.config.stash.get(WORLDS_KEY, 0)
        if hasattr(self.config, "workerinput"):
            self.config.workeroutput["conformance_worlds"] = started  # type: ignore[attr-defined]
            return  # an xdist worker: the controller writes
        if started:
            self.worlds["main"] = started
        backend = self.config.stash[BACKEND_KEY]
        baseline = self.config.stash[BASELINE_KEY]
        if baseline is not None:
            self._check_entries(session, baseline, backend)
        if not self.results:
            return  # no cell ran
        results = sorted(self.results, key=lambda r: r.id)
        if all(r.outcome in (Outcome.SKIP, Outcome.UNSUPPORTED) for r in results):
            self.gate_lines.append(
                f"GATE: no cell ran: all {len(results)} selected cells were skipped or unsupported here "
                "(see the reasons in the reports); a run that tested nothing is not a pass"
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        env = environment(
            backend=backend,
            world_sizes=sorted({int(r.axes["world_size"]) for r in results}),
            matrix=self.config.getoption("matrix"),
            args=list(self.config.invocation_params.args),
            hypothesis=_hypothesis_settings(self.config),
            strategies=self.config.stash[REGISTRY_KEY].versions(),
        )
        if baseline is not None:
            env["baseline"] = {"path": baseline.path, "sha256": baseline.sha256, "profile": baseline.profile}
        self.out = self.report_dir(backend)
        write_reports(self.out, env, results, baseline)
        if self.config.getoption("update_baseline"):
            header = (
                f"Known outcomes: torch {env['torch']}, {env['backend']}, matrix {env['matrix']}.\n"
                f"Written by --update-baseline from a run at {env['time_utc']}; edit reasons, add links."
            )
            path = Path(self.config.getoption("baseline"))
            previous = load_baseline(path) if path.exists() else None
            path.write_text(render_baseline(results, header, env["matrix"], previous))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for line in self.gate_lines:
            terminalreporter.write_line(line, red=line.startswith("GATE"), yellow=line.startswith("warning"))
        if not self.results or self.out is None:
            return
        terminalreporter.section("conformance")
        terminalreporter.write_line(outcome_summary(self.results))
        reruns = rerun_summary(self.results)
        if reruns:
            terminalreporter.write_line(reruns, yellow=True)
        if self.worlds:
            started = ", ".join(f"{name} {n}" for name, n in sorted(self.worlds.items()))
            terminalreporter.write_line(f"worlds started: {started}")
        terminalreporter.write_line(f"results: {self.out / 'results.json'}")
        terminalreporter.write_line(f"matrix:  {self.out / 'matrix.md'} and matrix.html")

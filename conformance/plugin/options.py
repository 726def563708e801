"""Options, hypothesis profiles and markers; what a run is configured with."""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path

import pytest

from conformance.baseline import load_baseline
from conformance.case import API_KINDS
from conformance.layout.registry import families
from conformance.lifetime import die_with_parent
from conformance.matrix import CHECKS
from conformance.plugin.output import check_output
from conformance.plugin.results import ResultCollector
from conformance.plugin.shared import (
    BACKEND_KEY,
    BASELINE_KEY,
    DEFAULT_HYPOTHESIS_PROFILE,
    HYPOTHESIS_PROFILES,
    REGISTRY_KEY,
)
from conformance.run_options import add_run_options
from conformance.runner import backend_choice
from conformance.strategy.registry import build_registry

KIND_MARKERS = sorted(set(API_KINDS.values()))
WRAPPER_MARKERS = families()  # the wrapper families


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "checkpoint conformance matrix")
    add_run_options(group.addoption)  # --matrix, --backend, --case-timeout, --strategy
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
        help="run every cell (every phase of a check) in a world of its own instead of warm worlds, "
        "its ranks forked from a process that has only imported torch: slower; outcomes must be "
        "the same either way",
    )
    group.addoption(
        "--spawn-worlds",
        action="store_true",
        help="spawn every rank as a new python that imports torch itself, instead of forking it from "
        "a template process that has (slower: about 2.5 s a world start); outcomes must be the same",
    )


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
    # gloo, nccl, or auto (each cell picks by the GPUs it needs: runner.cell_backend). Every
    # xdist worker sees every GPU, so whether a cell runs never depends on the worker it lands
    # on; worlds of different workers may share a GPU (each world its own communicator).
    config.stash[BACKEND_KEY] = backend_choice(config.getoption("backend"))
    if hasattr(config, "workerinput"):
        die_with_parent(os.getppid(), signal.SIGTERM)  # a killed controller takes its workers along
    try:
        config.stash[REGISTRY_KEY] = build_registry(config.getoption("strategy"))
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(str(exc)) from None
    for strategy in config.stash[REGISTRY_KEY].strategies.values():  # layouts a framework brings itself
        for family in sorted(
            {w.split("+", 1)[0] for w, _ in strategy.supports.layouts} - set(WRAPPER_MARKERS)
        ):
            config.addinivalue_line(
                "markers", f"{family}: cells that {strategy.name} wraps with its own engine"
            )
    config.pluginmanager.register(ResultCollector(config), "conformance-results")
    baseline = config.getoption("baseline")
    if config.getoption("update_baseline") and not baseline:
        raise pytest.UsageError("--update-baseline needs --baseline FILE: the file to write")
    try:
        gate = baseline and not config.getoption("update_baseline")
        config.stash[BASELINE_KEY] = load_baseline(Path(baseline)) if gate else None
    except (FileNotFoundError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    if not hasattr(config, "workerinput"):  # the controller writes the reports
        collector = config.pluginmanager.get_plugin("conformance-results")
        check_output(
            collector.report_dir(config.stash[BACKEND_KEY]), baseline, config.getoption("update_baseline")
        )
    loaded = config.stash[BASELINE_KEY]
    if loaded is not None and loaded.outcome_only and not hasattr(config, "workerinput"):
        warnings.warn(
            f"{baseline}: {len(loaded.outcome_only)} entries expect an outcome only (no findings = [...]), "
            f"e.g. {loaded.outcome_only[0]!r}: the gate cannot see a new difference inside them; rewrite "
            "the file with --update-baseline",
            stacklevel=1,
        )

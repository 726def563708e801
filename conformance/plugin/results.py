"""The results of a run: gathered from every cell (on the controller under xdist), written as the
reports, and judged by the gate at the end."""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from conformance.baseline import Baseline, load_baseline, render_baseline
from conformance.matrix import CHECKS, PROFILES, run_cells
from conformance.matrix.cells import declared_unsupported
from conformance.outcome import CellResult, Outcome
from conformance.plugin.partial import Progress, holds_complete_report, partial, partial_folder, selection
from conformance.plugin.shared import (
    BACKEND_KEY,
    BASELINE_KEY,
    DEFAULT_HYPOTHESIS_PROFILE,
    PROPERTY,
    REGISTRY_KEY,
    WORLDS_KEY,
)
from conformance.property import properties
from conformance.report.environment import environment
from conformance.report.write import outcome_summary, rerun_summary, write_reports
from conformance.strategy.registry import Registry


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
    return cells | {p.id for p in properties(profile, registry)}


def _workers(config: pytest.Config) -> int:
    """The run's pytest-xdist workers (`-n`); 0 when it ran in one process."""
    workers = getattr(config.option, "numprocesses", None)
    return int(workers) if isinstance(workers, int) else 0


class ResultCollector:
    """Gathers every cell's result (on the controller under xdist) and writes the reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[CellResult] = []
        self.out: Path | None = None
        self.gate_lines: list[str] = []  # what the gate says at the end: disappeared, unmatched
        self.worlds: dict[str, int] = {}  # process (xdist worker id, or "main") -> worlds it started
        self.started = time.monotonic()  # the run's wall time is counted from here
        self.progress = Progress()  # which collected tests ran: a run cut short is partial

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.progress.collect(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.progress.collect(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """An xdist worker finished: how many worlds it started."""
        self.worlds[node.gateway.id] = int(node.workeroutput.get("conformance_worlds", 0))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.progress.report(report)
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
            descriptions=self.config.stash[REGISTRY_KEY].descriptions(),
        )
        profile = PROFILES[self.config.getoption("matrix")]
        env["profile"] = {
            "description": profile.description,
            "declares": profile.declares,
            "covering": profile.covering.says() if profile.covering else None,
        }
        env["run"] = {
            "wall_s": round(time.monotonic() - self.started, 1),
            "workers": _workers(self.config),
        }
        if baseline is not None:
            env["baseline"] = {"path": baseline.path, "sha256": baseline.sha256, "profile": baseline.profile}
        self.out = self.report_dir(backend)
        cut = partial(self.config, session, self.progress, len(results))
        if cut is not None:
            env["partial"] = cut
            if holds_complete_report(self.out):
                kept, self.out = self.out, partial_folder(self.out)
                self.gate_lines.append(
                    f"warning: a partial run ({'; '.join(cut['why'])}): the complete report in {kept} "
                    f"is left as it is; this run's report is written to {self.out}"
                )
        folded = self._declared_unsupported(backend, {r.id for r in results})
        try:
            write_reports(self.out, env, results + folded, baseline)
        except OSError as exc:  # checked before the run; the folder changed under it
            failed, self.out = self.out, Path(tempfile.mkdtemp(prefix="conformance-reports-"))
            write_reports(self.out, env, results + folded, baseline)
            self.gate_lines.append(
                f"GATE: the reports could not be written to {failed} ({exc}); this run's are in {self.out}"
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.config.getoption("update_baseline"):
            header = (
                f"Known outcomes: torch {env['torch']}, {env['backend']}, matrix {env['matrix']}.\n"
                f"Written by --update-baseline from a run at {env['time_utc']}; edit reasons, add links."
            )
            path = Path(self.config.getoption("baseline"))
            previous = load_baseline(path) if path.exists() else None
            path.write_text(render_baseline(results, header, env["matrix"], previous))
            self.gate_lines.append(
                f"baseline written: {path} ({len(results)} cells); this run's own exit status still "
                "says whether every cell passed, the gate is the next run with --baseline"
            )

    def _declared_unsupported(self, backend: str, ran: set[str]) -> list[CellResult]:
        """A covering profile's run: the unsupported cells of its declaration, which it never
        enumerates, as results to fold into rules (report.rules). Only when the run selected the
        whole profile: a selection (-k, -m, node ids) says nothing of the cells it left out."""
        if selection(self.config):
            return []
        return declared_unsupported(
            self.config.stash[REGISTRY_KEY], self.config.getoption("matrix"), backend, ran
        )

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

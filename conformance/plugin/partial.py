"""Whether a run is the whole matrix: a run that was interrupted, stopped early, or given a
selection (-k, -m, --deselect, node ids, --lf) is partial. Its reports say so, and never
replace a complete report in place (a published table): they go beside it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.report.results import read_results, results_file

PARTIAL_SUFFIX = ".partial"


def selection(config: pytest.Config) -> list[str]:
    """The options that chose some cells of the matrix rather than all, as the user gave them."""
    chosen = []
    if config.getoption("keyword", None):
        chosen.append(f"-k {config.getoption('keyword')!r}")
    if config.getoption("markexpr", None):
        chosen.append(f"-m {config.getoption('markexpr')!r}")
    if config.getoption("deselect", None):
        chosen.append(f"--deselect ({len(config.getoption('deselect'))} ids)")
    if config.getoption("lf", None):
        chosen.append("--last-failed")
    named = [a for a in config.invocation_params.args if "::" in str(a)]
    if named:
        chosen.append(f"{len(named)} test ids named")
    return chosen


@dataclass
class Progress:
    """The test ids collected (by this process, or by the first xdist worker to report) and
    the ones that ran to their teardown."""

    collected: set[str] | None = None
    finished: set[str] = field(default_factory=set)

    def collect(self, ids: Any) -> None:
        if self.collected is None:
            self.collected = set(ids)

    def report(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.finished.add(report.nodeid)

    def unfinished(self) -> int:
        return len(self.collected - self.finished) if self.collected is not None else 0


def partial(config: pytest.Config, session: pytest.Session, progress: Progress, cells: int) -> dict | None:
    """The run's `partial` record (environment metadata), or None for the whole matrix."""
    why = selection(config)
    interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
    left = progress.unfinished()
    if interrupted or left:
        stopped = "interrupted" if interrupted else "stopped early"
        why.append(f"{stopped}: {left} collected tests never ran" if left else stopped)
    if not why:
        return None
    collected = len(progress.collected) if progress.collected is not None else None
    return {"why": why, "cells": cells, "collected": collected}


def holds_complete_report(directory: Path) -> bool:
    """Whether `directory` holds the results of a complete run (a published table, or a whole
    run's report), which a partial run must not replace."""
    path = results_file(directory)
    if not path.is_file():
        return False
    try:
        env, _ = read_results(path)
    except (OSError, ValueError):
        return True  # unreadable: not ours to overwrite either
    return not env.get("partial")


def partial_folder(directory: Path) -> Path:
    """Where a partial run writes when `directory` holds a complete report: beside it."""
    return directory.with_name(directory.name + PARTIAL_SUFFIX)

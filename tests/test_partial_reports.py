"""A run that is not the whole matrix (a selection, Ctrl-C) says so in its reports and never
replaces a complete report in place: a published table stays byte for byte as it was."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from conformance.report.results import read_results
from tests.procs import pytest_cases

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "reports" / "torch-2.13.0-cpu-gloo-ci"
ONE_CELL = "test_roundtrip and ddp-dsd_full-dcp-adamw-mlp-w2"


def _pytest(*args: str) -> list[str]:
    return pytest_cases("--matrix", "ci", *args)


def _table(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A copy of a published table, and its files' bytes."""
    table = tmp_path / "torch-2.13.0-cpu-gloo-ci"
    shutil.copytree(PUBLISHED, table)
    return table, {p.name: p.read_bytes() for p in table.iterdir()}


def test_a_selection_leaves_a_complete_report_as_it_is(tmp_path: Path) -> None:
    table, before = _table(tmp_path)
    proc = subprocess.run(
        _pytest("-k", ONE_CELL, "--report-dir", str(table)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert {p.name: p.read_bytes() for p in table.iterdir()} == before, log
    beside = table.with_name(table.name + ".partial")
    assert f"is left as it is; this run's report is written to {beside}" in log
    env, cells = read_results(beside)
    assert [c.id for c in cells] == ["ddp-dsd_full-dcp-adamw-mlp-w2"], log
    assert env["partial"]["cells"] == 1
    assert env["partial"]["why"] == [f"-k {ONE_CELL!r}"]
    assert "**PARTIAL RUN: 1 cells of 1 collected" in (beside / "matrix.md").read_text()
    assert "PARTIAL RUN: 1 cells" in (beside / "matrix.html").read_text()
    # a partial report is no complete one: the next partial run replaces it in place
    again = subprocess.run(
        _pytest("-k", ONE_CELL, "--report-dir", str(beside)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert not beside.with_name(beside.name + ".partial").exists(), again.stdout


def test_ctrl_c_marks_the_report_partial_and_keeps_the_table(tmp_path: Path) -> None:
    """SIGINT to the run's process group (as a terminal's Ctrl-C) once the first cell passed."""
    table, before = _table(tmp_path)
    log = tmp_path / "log.txt"
    with log.open("w") as out:
        proc = subprocess.Popen(
            _pytest("-k", "test_roundtrip and ddp-", "--report-dir", str(table)),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        while "." not in log.read_text().split("\n", 1)[0] and time.monotonic() < deadline:
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    text = log.read_text()
    assert {p.name: p.read_bytes() for p in table.iterdir()} == before, text
    data = json.loads((table.with_name(table.name + ".partial") / "results.json").read_text())
    why = data["environment"]["partial"]["why"]
    assert why[0] == "-k 'test_roundtrip and ddp-'" and why[1].startswith("interrupted"), why
    assert data["environment"]["partial"]["cells"] == len(data["cells"]) >= 1

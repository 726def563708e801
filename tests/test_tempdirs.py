"""The worlds' temp folders: none is left after SIGTERM of a run (serial and under xdist), and
what a SIGKILLed run left is removed by the next pool that starts."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conformance.world import folders
from tests.procs import alive, pytest_cases

ROOT = Path(__file__).resolve().parent.parent
CELLS = "test_roundtrip and ddp-"
PYTEST = pytest_cases("--matrix", "ci", "-k", CELLS)


def _start(tmp: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    with log.open("w") as out:
        return subprocess.Popen(
            [*PYTEST, "--report-dir", str(tmp / "reports"), *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _await_a_world(tmp: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until a pool's folder holds a started world (a cell is under way)."""
    deadline = time.monotonic() + 240
    while not list(tmp.glob(f"{folders.PREFIX}*/world-*")) and time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before a world started"
        time.sleep(0.2)
    time.sleep(1.0)


@pytest.mark.parametrize("workers", ["0", "2"], ids=["serial", "-n2"])
def test_sigterm_leaves_no_worlds_folder(tmp_path: Path, workers: str) -> None:
    log = tmp_path / "log.txt"
    proc = _start(tmp_path, log, "-n", workers)
    _await_a_world(tmp_path, proc)
    os.kill(proc.pid, signal.SIGTERM)  # the pytest process alone, as a job scheduler sends it
    proc.wait(timeout=120)
    deadline = time.monotonic() + 30  # xdist workers end after their controller
    while list(tmp_path.glob(f"{folders.PREFIX}*")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not list(tmp_path.glob(f"{folders.PREFIX}*")), log.read_text()[-2000:]


def test_a_sigkilled_runs_folder_is_removed_by_the_next_pool(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    proc = _start(tmp_path, log, "-n", "0")
    _await_a_world(tmp_path, proc)
    left = list(tmp_path.glob(f"{folders.PREFIX}*"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while any(alive(int((f / folders.OWNER).read_text())) for f in left) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left and all(f.exists() for f in left), "SIGKILL runs no handler: the folder stays"
    kept = tmp_path / f"{folders.PREFIX}live"
    kept.mkdir()
    (kept / folders.OWNER).write_text(f"{os.getpid()}\n")  # a live owner's folder stays
    new = folders.make(tmp_path)
    assert not any(f.exists() for f in left)
    assert kept.exists() and new.exists()

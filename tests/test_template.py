"""Forked ranks (conformance.world.template, the worlds of `--fresh-worlds`): they run cells as
spawned ranks do, report crashes and hangs the same way, see the world's process as it is when
they start, and leave nothing behind."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.world import World, WorldPool, WorldStartError
from conformance.world.launcher import ForkLauncher
from tests import cells
from tests.procs import alive

TIMEOUT_S = 8.0


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[ForkLauncher]:
    launcher = ForkLauncher(tmp_path)
    yield launcher
    launcher.close()


def forked_world(launcher: ForkLauncher, tmp_path: Path, size: int = 2) -> World:
    return World("gloo", size, tmp_path, launcher=launcher).start()


def test_a_forked_world_runs_a_cell_on_every_rank(launcher: ForkLauncher, tmp_path: Path) -> None:
    world = forked_world(launcher, tmp_path)
    run = world.run(cells.ok, "x", timeout_s=TIMEOUT_S, seed=5)
    world.close()
    assert run.status == "ok", run.detail
    assert run.values == [
        {"rank": 0, "sum": 1.0, "seed": 5, "arg": "x"},
        {"rank": 1, "sum": 1.0, "seed": 5, "arg": "x"},
    ]


def test_a_forked_rank_sees_the_environment_and_path_of_now(
    launcher: ForkLauncher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked_world(launcher, tmp_path).close()  # the template is up, with the old environment
    monkeypatch.setenv("CONFORMANCE_TEMPLATE_PROBE", "set after the template started")
    world = forked_world(launcher, tmp_path)
    run = world.run(cells.environment, "CONFORMANCE_TEMPLATE_PROBE", timeout_s=TIMEOUT_S)
    world.close()
    assert run.status == "ok", run.detail
    assert {v["value"] for v in run.values} == {"set after the template started"}
    assert len({v["pid"] for v in run.values}) == 2


@pytest.mark.parametrize(
    ("cell", "first_line"),
    [
        (cells.exit_on_rank1, "rank 1 exited with code 3"),
        (cells.segfault_on_rank1, "rank 1 was killed by SIGSEGV (exit code -11)"),
    ],
)
def test_a_forked_rank_s_death_is_a_crash_naming_rank_and_code(
    launcher: ForkLauncher, tmp_path: Path, cell: cells.CellFn, first_line: str
) -> None:
    world = forked_world(launcher, tmp_path)
    pids = world.pids()
    run = world.run(cell, None, timeout_s=TIMEOUT_S)
    assert run.status == "crash"
    assert run.detail.startswith(first_line), run.detail
    assert not world.alive and not any(alive(pid) for pid in pids)


def test_a_forked_world_s_hang_shows_every_stack(launcher: ForkLauncher, tmp_path: Path) -> None:
    world = forked_world(launcher, tmp_path)
    run = world.run(cells.skip_collective_on_rank1, None, timeout_s=3.0)
    assert run.status == "hang"
    assert "--- rank 0 output:" in run.detail and "in barrier" in run.detail


def test_a_fresh_pool_forks_a_new_world_for_every_run_and_leaves_nothing(tmp_path: Path) -> None:
    pids: list[int] = []
    with WorldPool(tmp_path, fresh=True) as pool:
        for _ in range(3):
            start = time.monotonic()
            run = pool.run("gloo", 2, cells.environment, "HOME", timeout_s=TIMEOUT_S)
            assert run.status == "ok", run.detail
            assert time.monotonic() - start < 60
            pids += [v["pid"] for v in run.values]
        assert pool.started == 3 and len(set(pids)) == 6
    assert not any(alive(pid) for pid in pids)
    assert not any(p for p in os.listdir(tmp_path))  # the pool's directory, the template's log


def test_a_dead_template_is_replaced_and_its_ranks_die_with_it(
    launcher: ForkLauncher, tmp_path: Path
) -> None:
    world = forked_world(launcher, tmp_path)
    pids = world.pids()
    assert launcher.template_pid is not None
    os.kill(launcher.template_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids), "a rank outlived its template"
    run = world.run(cells.ok, None, timeout_s=TIMEOUT_S)
    assert run.status == "crash" and "SIGKILL" in run.detail
    again = forked_world(launcher, tmp_path)  # a new template
    assert again.run(cells.ok, None, timeout_s=TIMEOUT_S).status == "ok"
    again.close()


def test_a_template_that_cannot_import_is_a_world_start_error(tmp_path: Path) -> None:
    launcher = ForkLauncher(tmp_path, ("no_such_module_anywhere",))
    try:
        with pytest.raises(WorldStartError, match="no_such_module_anywhere"):
            forked_world(launcher, tmp_path)
    finally:
        launcher.close()

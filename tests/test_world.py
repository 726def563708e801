"""Worlds report crash, hang and error per cell, recover, isolate cells, and leave nothing behind."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from conformance.world import World, WorldPool
from tests import cells
from tests.procs import alive

TIMEOUT_S = 8.0


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def assert_next_cell_passes_in_a_fresh_world(pool: WorldPool, old_pids: list[int]) -> None:
    run = pool.run("gloo", 2, cells.ok, "after", timeout_s=TIMEOUT_S)
    assert run.status == "ok", run.detail
    assert [v["sum"] for v in run.values] == [1.0, 1.0]
    assert not any(alive(pid) for pid in old_pids), "the discarded world left a process behind"
    assert set(pool.world("gloo", 2).pids()).isdisjoint(old_pids)


def test_ok_cell_reaches_every_rank(pool: WorldPool) -> None:
    run = pool.run("gloo", 2, cells.ok, "x", timeout_s=TIMEOUT_S, seed=5)
    assert run.status == "ok", run.detail
    assert run.values == [
        {"rank": 0, "sum": 1.0, "seed": 5, "arg": "x"},
        {"rank": 1, "sum": 1.0, "seed": 5, "arg": "x"},
    ]


def test_exit_on_rank1_is_a_crash_naming_rank_and_code(pool: WorldPool) -> None:
    pids = pool.world("gloo", 2).pids()
    run = pool.run("gloo", 2, cells.exit_on_rank1, None, timeout_s=TIMEOUT_S)
    assert run.status == "crash"
    assert run.detail.startswith("rank 1 exited with code 3")
    assert run.duration_s < TIMEOUT_S
    assert_next_cell_passes_in_a_fresh_world(pool, pids)


def test_segfault_on_rank1_is_a_crash_naming_the_signal(pool: WorldPool) -> None:
    pids = pool.world("gloo", 2).pids()
    run = pool.run("gloo", 2, cells.segfault_on_rank1, None, timeout_s=TIMEOUT_S)
    assert run.status == "crash"
    assert run.detail.startswith("rank 1 was killed by SIGSEGV (exit code -11)")
    assert "Segmentation fault" in run.detail  # faulthandler's dump of the dying rank
    assert "segfault_on_rank1" in run.detail
    assert_next_cell_passes_in_a_fresh_world(pool, pids)


def test_skipped_collective_is_a_hang_with_every_stack(pool: WorldPool) -> None:
    pids = pool.world("gloo", 2).pids()
    start = time.monotonic()
    run = pool.run("gloo", 2, cells.skip_collective_on_rank1, None, timeout_s=3.0)
    assert run.status == "hang"
    assert time.monotonic() - start < 3.0 + 10  # the timeout, the stack dump, the kill
    assert "timed out after 3 s" in run.detail
    assert "--- rank 0 output:" in run.detail and "--- rank 1 output:" in run.detail
    assert "in barrier" in run.detail  # rank 0's stack shows where it waits
    assert_next_cell_passes_in_a_fresh_world(pool, pids)


def test_error_on_rank1_comes_first_while_rank0_waits(pool: WorldPool) -> None:
    run = pool.run("gloo", 2, cells.raise_on_rank1, None, timeout_s=TIMEOUT_S)
    assert run.status == "error"
    assert run.detail.startswith("rank 1 raised ValueError first:")
    assert "rank one broke on purpose" in run.detail.split("--- then")[0]
    assert run.duration_s < TIMEOUT_S
    after = pool.run("gloo", 2, cells.ok, None, timeout_s=TIMEOUT_S)
    assert after.status == "ok", after.detail


def test_cells_are_isolated_from_each_other() -> None:
    # Its own pool: this checks the per-cell reset of globals, not recovery after the error,
    # crash and hang cells the shared pool has served.
    with WorldPool() as pool:
        _assert_isolated(pool)


GLOO_CONNECT_FLAKE = "Gloo connectFullMesh failed"


def _assert_isolated(pool: WorldPool) -> None:
    first = pool.run("gloo", 2, cells.leak_state, None, timeout_s=TIMEOUT_S, seed=11)
    if first.status == "error" and GLOO_CONNECT_FLAKE in first.detail:
        # Under -n 2 load, the first dist.new_group of a fresh world has failed to connect its
        # gloo pair ("Connection closed by peer") in about 1 run in 10; not understood yet (see
        # issue 2's notes). One retry, for this exact error only: any other failure still fails.
        first = pool.run("gloo", 2, cells.leak_state, None, timeout_s=TIMEOUT_S, seed=11)
    second = pool.run("gloo", 2, cells.leak_state, None, timeout_s=TIMEOUT_S, seed=11)
    assert first.status == "ok", first.detail
    assert second.status == "ok", second.detail
    assert first.values == second.values  # same seed, grad mode, dtype, groups and cwd
    assert first.values[0]["groups"] == 1  # the sub-group the first cell made is gone


def test_world_of_one_rank(pool: WorldPool) -> None:
    run = pool.run("gloo", 1, cells.ok, None, timeout_s=TIMEOUT_S)
    assert run.status == "ok"
    assert run.values[0]["sum"] == 0.0


def test_closing_leaves_no_process_and_no_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    world = World("gloo", 2, tmp_path).start()
    pids, directory = world.pids(), world.dir
    assert world.run(cells.ok, None, timeout_s=TIMEOUT_S).status == "ok"
    world.close()
    assert not any(alive(pid) for pid in pids)
    assert not directory.exists()  # FileStore and logs removed


def test_unpicklable_cell_value_is_an_error_not_a_dead_world(pool: WorldPool) -> None:
    run = pool.run("gloo", 2, cells.unpicklable, None, timeout_s=TIMEOUT_S)
    assert run.status == "error"
    assert "could not be sent" in run.detail
    assert pool.run("gloo", 2, cells.ok, None, timeout_s=TIMEOUT_S).status == "ok"


def test_cell_the_ranks_cannot_import_is_an_error(pool: WorldPool) -> None:
    run = pool.run("gloo", 2, cells.ok, cells.Unimportable(), timeout_s=TIMEOUT_S)
    assert run.status == "error"
    assert "No module named 'no_such_module_anywhere'" in run.detail
    assert pool.run("gloo", 2, cells.ok, None, timeout_s=TIMEOUT_S).status == "ok"


def test_cell_function_in_main_is_refused_clearly(pool: WorldPool) -> None:
    def local(ctx, arg):  # type: ignore[no-untyped-def]
        return None

    local.__module__ = "__main__"
    with pytest.raises(ValueError, match="defined in __main__"):
        pool.run("gloo", 2, local, None, timeout_s=TIMEOUT_S)


def test_dtensor_caches_do_not_leak_meshes_between_cells(pool: WorldPool) -> None:
    for _ in range(2):
        run = pool.run("gloo", 4, cells.mesh_op, None, timeout_s=30)
        assert run.status == "ok", run.detail
        assert all(v == {"same_mesh": True, "sum": 56.0} for v in run.values)

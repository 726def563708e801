"""Worlds report crash, hang and error per cell, recover, isolate cells, and leave nothing behind."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from conformance.world import CellRun, World, WorldPool
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


@pytest.mark.parametrize("spawn", [False, True], ids=["forked", "spawned"])
def test_warm_worlds_fork_from_a_template_unless_told_to_spawn(spawn: bool) -> None:
    """A warm world's ranks are forked from the pool's template (a restart after a crash costs
    a fork, not an `import torch`); --spawn-worlds spawns them. Either way a crash is the cell's
    and the next cell runs in a new world."""
    from conformance.world.launcher import ForkLauncher, SpawnLauncher

    with WorldPool(spawn=spawn) as pool:
        assert isinstance(pool.launcher, SpawnLauncher if spawn else ForkLauncher)
        pids = pool.world("gloo", 2).pids()
        assert pool.run("gloo", 2, cells.ok, "x", timeout_s=TIMEOUT_S).status == "ok"
        run = pool.run("gloo", 2, cells.exit_on_rank1, None, timeout_s=TIMEOUT_S)
        assert run.status == "crash" and run.detail.startswith("rank 1 exited with code 3")
        assert_next_cell_passes_in_a_fresh_world(pool, pids)
        assert pool.started == 2


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


def test_skipped_collective_is_a_hang_with_every_stack() -> None:
    with WorldPool() as pool:  # a fresh world: a hang there is not run again
        pids = pool.world("gloo", 2).pids()
        start = time.monotonic()
        run = pool.run("gloo", 2, cells.skip_collective_on_rank1, None, timeout_s=3.0)
        assert run.status == "hang"
        assert time.monotonic() - start < 3.0 + 10  # the timeout, the stack dump, the kill
        assert "timed out after 3 s" in run.detail
        assert "--- rank 0 output:" in run.detail and "--- rank 1 output:" in run.detail
        assert "in barrier" in run.detail  # rank 0's stack shows where it waits
        assert not run.note and pool.started == 1
        assert_next_cell_passes_in_a_fresh_world(pool, pids)


def test_hang_in_a_warm_world_runs_again_in_a_fresh_one(pool: WorldPool) -> None:
    assert pool.run("gloo", 2, cells.ok, None, timeout_s=TIMEOUT_S).status == "ok"  # warm
    warm = pool.world("gloo", 2)
    earlier, pids = warm.cells_run, warm.pids()
    run = pool.run("gloo", 2, cells.hang_unless_first_cell, "x", timeout_s=3.0)
    assert run.status == "ok", run.detail  # the fresh world's run is the cell's
    assert [v["sum"] for v in run.values] == [1.0, 1.0]
    assert run.note.startswith(f"hung in a warm world after {earlier} other cells had run there")
    assert "then ran in a fresh world: ok" in run.note
    assert "timed out after 3 s" in run.first_run and "in barrier" in run.first_run  # nothing lost
    described = run.described("the check's detail")
    assert described.splitlines()[:2] == [run.note, "the check's detail"]
    assert described.endswith(run.first_run)
    assert set(pool.world("gloo", 2).pids()).isdisjoint(pids)


def test_hang_in_a_fresh_world_too_is_a_hang_with_both_runs(pool: WorldPool) -> None:
    assert pool.run("gloo", 2, cells.ok, None, timeout_s=TIMEOUT_S).status == "ok"  # warm
    started = pool.started
    run = pool.run("gloo", 2, cells.skip_collective_on_rank1, None, timeout_s=3.0)
    assert run.status == "hang" and "timed out after 3 s" in run.detail
    assert "then ran in a fresh world: hang" in run.note and "in barrier" in run.first_run
    assert pool.started == started + 1  # one rerun, never a second


def test_a_rank_dying_as_the_warm_world_remakes_its_group_is_not_the_cells_crash(pool: WorldPool) -> None:
    """After an error the next cell gets a fresh process group; a rank that dies making it
    died before the cell began: a fault of the world, so the cell runs in a fresh world."""
    assert pool.run("gloo", 2, cells.poison_group_creation, None, timeout_s=TIMEOUT_S).status == "error"
    run = pool.run("gloo", 2, cells.ok, "after", timeout_s=TIMEOUT_S)
    assert run.status == "ok", run.detail
    assert "re-creating the warm world's process group" in run.note
    assert "then ran in a fresh world: ok" in run.note
    assert "rank 1 exited with code 5" in run.first_run


def test_error_on_rank1_comes_first_while_rank0_waits(pool: WorldPool) -> None:
    run = pool.run("gloo", 2, cells.raise_on_rank1, True, timeout_s=TIMEOUT_S)
    assert run.status == "error"
    assert run.raised_in == "strategy.load"
    assert run.detail.startswith("rank 1 raised ValueError first in strategy.load:")
    assert "rank one broke on purpose" in run.detail.split("--- then")[0]
    assert run.duration_s < TIMEOUT_S
    after = pool.run("gloo", 2, cells.ok, None, timeout_s=TIMEOUT_S)
    assert after.status == "ok", after.detail


def test_harness_error_first_is_a_harness_error_whatever_the_code_under_test_did_after(
    pool: WorldPool,
) -> None:
    # rank 1's harness code raises first; rank 0's code under test fails after it (its peer is
    # gone): the cause is the harness's, and so is the status
    run = pool.run("gloo", 2, cells.raise_on_rank1, False, timeout_s=TIMEOUT_S)
    assert run.status == "harness-error", run.detail
    assert run.raised_in == ""
    assert run.detail.startswith("rank 1 raised ValueError first in the harness's own code:")


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


def test_a_dtensor_saved_in_one_cell_loads_in_a_later_cell_as_in_a_fresh_world(pool: WorldPool) -> None:
    """A warm world names a cell's groups as a fresh process does, so a DeviceMesh unpickled
    from a checkpoint finds its group by name whichever cells ran before (torch 2.11 on a GPU
    machine: "Could not resolve the process group registered under the name 7")."""
    assert pool.run("gloo", 2, cells.leak_state, None, timeout_s=TIMEOUT_S).status == "ok"  # groups made
    directory = tempfile.mkdtemp(dir=pool.root)
    saved = pool.run("gloo", 2, cells.save_dtensor, directory, timeout_s=TIMEOUT_S)
    assert saved.status == "ok", saved.detail
    loaded = pool.run("gloo", 2, cells.load_dtensor, directory, timeout_s=TIMEOUT_S)
    assert loaded.status == "ok", loaded.detail
    assert loaded.values == [[0.0, 1.0, 2.0, 3.0]] * 2


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


def test_unpicklable_cell_value_is_a_harness_error_not_a_dead_world(pool: WorldPool) -> None:
    run = pool.run("gloo", 2, cells.unpicklable, None, timeout_s=TIMEOUT_S)
    assert run.status == "harness-error"  # the world's plumbing, not code under test
    assert "could not be sent" in run.detail
    assert pool.run("gloo", 2, cells.ok, None, timeout_s=TIMEOUT_S).status == "ok"


def test_cell_the_ranks_cannot_import_is_a_harness_error(pool: WorldPool) -> None:
    run = pool.run("gloo", 2, cells.ok, cells.Unimportable(), timeout_s=TIMEOUT_S)
    assert run.status == "harness-error"
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


class _RerunPool:
    """A pool whose every run passed in a fresh world after a hang in a warm one."""

    root = Path(tempfile.gettempdir())

    def run(self, backend, size, fn, arg, *, timeout_s, seed=0, slot=""):  # type: ignore[no-untyped-def]
        compared = {"keys": 3, "tensors": 2, "elements": 10}
        values = [{"rank": r, "failures": [], "failure_count": 0, "compared": compared} for r in range(size)]
        note = "hung in a warm world after 7 other cells had run there, then ran in a fresh world: ok"
        return CellRun("ok", values, note=note, first_run="timed out after 60 s; STACKS")


def test_a_cell_that_passed_after_a_rerun_says_so_first_and_keeps_the_stacks() -> None:
    from conformance.matrix import cells as matrix_cells
    from conformance.runner import run_case

    case = next(c for c in matrix_cells("ci", "roundtrip") if c.id == "ddp-sd_full-torch_save-adamw-mlp-w2")
    result = run_case(_RerunPool(), case, backend="gloo", timeout_s=60)
    lines = result.detail.splitlines()
    assert result.outcome.value == "pass" and lines[0].startswith("hung in a warm world after 7"), (
        result.detail
    )
    assert lines[1].startswith("bitwise equal after the round trip") and result.detail.endswith("STACKS")


def test_a_check_names_each_phase_the_pool_ran_again() -> None:
    from conformance.check.phases import Phases

    phases = Phases(_RerunPool(), "gloo", 60.0, seed=0)
    phases.run("save", 2, cells.ok, None)
    phases.run("load", 1, cells.ok, None)
    lines = phases.described("the check's detail").splitlines()
    assert lines[0].startswith("[save phase] hung in a warm world after 7")
    assert lines[1].startswith("[load phase] hung in a warm world after 7")
    assert lines[2] == "the check's detail"
    assert lines[3:] == [
        "--- [save phase] the first run, in the warm world:",
        "timed out after 60 s; STACKS",
        "--- [load phase] the first run, in the warm world:",
        "timed out after 60 s; STACKS",
    ]


def test_auto_runs_a_cell_on_nccl_where_the_gpus_hold_its_worlds_and_on_gloo_beyond() -> None:
    from conformance.case import Case, Transfer
    from conformance.runner import cell_backend

    w1 = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 1)
    w2 = dataclasses.replace(w1, world_size=2)
    w1_to_w2 = Transfer("reshard", w1, w2)
    assert [cell_backend("auto", c, 1) for c in (w1, w2, w1_to_w2)] == ["nccl", "gloo", "gloo"]
    assert [cell_backend("auto", c, 2) for c in (w1, w2, w1_to_w2)] == ["nccl", "nccl", "nccl"]
    assert [cell_backend("auto", c, 0) for c in (w1, w2)] == ["gloo", "gloo"]
    assert cell_backend("gloo", w1, 8) == "gloo" and cell_backend("nccl", w2, 1) == "nccl"


def test_a_cell_clears_dtensor_caches_without_their_own_cache_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.9's sharding propagator caches in a LocalLRUCache (a threading.local around an
    lru_cache) with no cache_clear of its own: left alone, a later cell got an earlier cell's
    DeviceMesh, whose groups were destroyed ("Could not resolve the process group registered
    under the name 2"). The per-cell reset clears the lru_cache it wraps."""
    import functools
    import threading

    from torch.distributed.tensor import DTensor

    from conformance.world.rank import _clear_dtensor_caches

    class LocalLRUCache(threading.local):
        def __init__(self) -> None:
            self.cache = functools.lru_cache(maxsize=None)(lambda x: x)

    cached = LocalLRUCache()
    cached.cache(1)
    propagator = DTensor._op_dispatcher.sharding_propagator
    monkeypatch.setattr(propagator, "old_style_cache", cached, raising=False)
    _clear_dtensor_caches()
    assert cached.cache.cache_info().currsize == 0


def test_the_template_imports_no_framework_on_a_cuda_build() -> None:
    """torchtitan's checkpoint module and DeepSpeed (without DS_ACCELERATOR) initialise CUDA as
    they are imported on a CUDA build: a template that imported them forked ranks that could not
    use CUDA ("Cannot re-initialize CUDA in forked subprocess", seen on torch 2.15.0's CUDA build)."""
    from conformance.world.launcher import template_modules
    from conformance.world.template import OPTIONAL

    assert OPTIONAL + "deepspeed" in template_modules((), ("deepspeed",), cuda_build=False)
    assert not any(m.startswith(OPTIONAL) for m in template_modules((), ("deepspeed",), cuda_build=True))


@pytest.mark.skipif(
    not torch.backends.cuda.is_built(),
    reason="a CPU build of torch is never in a bad fork: run it in a CUDA build's venv",
)
def test_a_forked_rank_may_use_cuda_after_the_template_s_imports() -> None:
    """The frameworks that initialise CUDA when imported, warm in the template: its forked ranks
    are not in a bad fork (in the 2.15.0 venv, CUDA build on this CPU host, it fails without the
    fix: [False] == [True])."""
    frameworks = ("torchtitan.components.checkpoint", "deepspeed", "lightning.pytorch")
    with WorldPool(warm=frameworks) as pool:
        run = pool.run("gloo", 1, cells.cuda_usable_after_fork, None, timeout_s=TIMEOUT_S)
    assert run.status == "ok", run.detail
    assert run.values == [True]

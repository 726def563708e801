"""Saves shared by the cells of a process (conformance.check.phases.SharedSaves): a cell's
outcome and detail are the same whether it loaded a copy of another cell's save or saved
alone (but for which rank's error reached the world first, a race when every rank raises on
its own), the save really is shared, and a checkpoint that a copy cannot stand for (it names its
own folder, or wrote beside it) is never shared."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.case import Case, Transfer
from conformance.check.phases import SharedSaves, self_contained
from conformance.outcome import CellResult, Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests.sharing import INDEX, names_its_folder

DDP = Case("ddp", "replicate", "sd_full", "torch_save", "adamw", "mlp", 2)
DCP = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 2)


_RAISED = re.compile(r"^(?:--- then )?rank (\d+) raised (\S+)(?: first)?(.*):$")


def what_it_says(result: CellResult) -> tuple[object, ...]:
    """The outcome, the check's own lines and, per rank that raised, its error type, where and
    its last line: the detail but for the order in which the ranks' errors arrived (both ranks
    raise on their own on a damaged file; which reply comes first is a race, and the detail
    names it "first")."""
    own: list[str] = []
    ranks: list[tuple[str, ...]] = []
    block: list[str] = []
    for line in result.detail.splitlines():
        header = _RAISED.match(re.sub(r"^\[[^\]]*\] ", "", line))
        if header:
            if block:
                ranks.append((*block[:1], *block[-1:]))
            block = [" ".join(header.groups()), ""]
            own.append(line[: line.index("rank ")])  # the phase it ended
        elif block:
            block[-1] = line
        else:
            own.append(line)
    if block:
        ranks.append((*block[:1], *block[-1:]))
    return result.outcome, tuple(own), tuple(sorted(ranks))


def corrupt(case: Case, variant: str) -> Case:
    return dataclasses.replace(case, check="corrupt", variant=variant)


@pytest.fixture
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def test_a_cell_that_loads_a_shared_save_ends_as_it_ends_alone(pool: WorldPool) -> None:
    shared = SharedSaves(pool.root)
    first, second = corrupt(DDP, "flipped_bytes"), corrupt(DDP, "truncated")
    reshard = Transfer("reshard", DDP, dataclasses.replace(DDP, world_size=1))
    results = {
        c.id: run_case(pool, c, backend="gloo", timeout_s=60, shared=shared) for c in (first, second, reshard)
    }
    assert len(shared.saved) == 1 and not shared.unshareable  # one save, three cells
    # in the world of 2 ranks: the one save and the two corrupt loads (the reshard loads in 1 rank)
    assert pool.world("gloo", 2).cells_run == 3
    with WorldPool() as alone_pool:
        for cell in (second, reshard):
            alone = run_case(alone_pool, cell, backend="gloo", timeout_s=60)
            assert what_it_says(alone) == what_it_says(results[cell.id])
    assert results[second.id].outcome is Outcome.PASS, results[second.id].detail


def test_a_checkpoint_that_names_its_folder_is_never_shared(pool: WorldPool) -> None:
    """Its load would read the first cell's folder, undamaged, through any copy: every cell
    saves its own, and each damage is still caught."""
    shared = SharedSaves(pool.root)
    for variant in ("other_model", "truncated"):  # the first leaves its folder as saved
        result = run_case(
            pool,
            corrupt(DCP, variant),
            backend="gloo",
            timeout_s=60,
            strategy_factory=names_its_folder,
            shared=shared,
        )
        assert result.outcome is Outcome.PASS, result.detail
    assert not shared.saved and len(shared.unshareable) == 1


def test_self_contained_refuses_what_a_copy_cannot_stand_for(tmp_path: Path) -> None:
    clean = tmp_path / "a" / "checkpoint"
    clean.mkdir(parents=True)
    (clean / "data.bin").write_bytes(b"\x00" * 8)
    assert self_contained(clean)
    (clean / INDEX).write_text(str(clean.parent))  # names its folder
    assert not self_contained(clean)
    beside = tmp_path / "b" / "checkpoint"
    beside.mkdir(parents=True)
    (beside.parent / "latest").write_text("checkpoint")  # wrote beside it
    assert not self_contained(beside)

"""The torch-checkpointing adapter as a user runs it (python -m conformance libraries --install): the row
round-trips and resumes; a save that captures the step after the call and a load that leaves
the optimizer out are caught; its two witness cells show the library's CPU and filesystem
limits (findings torch-checkpointing-reshard-needs-cuda, torch-checkpointing-direct-io-ext4)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import tempfile
from collections.abc import Callable, Iterator

import pytest

from conformance.case import Case
from conformance.check.registry import CHECKS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_libraries

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch_checkpointing") is None,
    reason="torch_checkpointing is not installed (python -m conformance libraries --install)",
)

CELL = "torch_checkpointing-fsdp2-sharded-torch_checkpointing-adamw-mlp-w2"


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def cell(strategy, check: str, cell_id: str) -> Case:  # type: ignore[no-untyped-def]
    return next(c for c in CHECKS[check].strategy_cells("default", strategy) if c.id == cell_id)


def refuses_unaligned_direct_writes(directory: str) -> bool:
    """ext4 and XFS: O_DIRECT opens, an unaligned write fails (the finding's condition)."""
    probe = os.path.join(directory, "probe")
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
    except OSError:
        return False
    try:
        os.write(fd, b"abc")
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
        os.remove(probe)


@pytest.mark.parametrize(
    ("factory", "needle"),
    [
        (broken_libraries.stages_the_step_after, "values differ"),
        (broken_libraries.loads_no_optimizer, "optim"),
    ],
    ids=["stages_the_step_after", "loads_no_optimizer"],
)
def test_the_round_trip_catches_a_broken_variant(
    pool: WorldPool, factory: Callable[[Case], object], needle: str
) -> None:
    from conformance.adapters.torch_checkpointing import TORCH_CHECKPOINTING

    case = cell(TORCH_CHECKPOINTING, "roundtrip", CELL)
    control = run_case(pool, case, backend="gloo", timeout_s=120, registered=TORCH_CHECKPOINTING)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(TORCH_CHECKPOINTING, factory=factory)
    result = run_case(pool, case, backend="gloo", timeout_s=120, registered=broken)
    assert result.outcome is Outcome.FAIL, result.detail
    assert needle in result.detail, result.detail


# The damage every rank meets (other shapes) is a FAIL once swallowed. Damage one rank meets
# alone (a rank's file cut or deleted): that rank swallows and goes on, its peers' load completes,
# and the two disagree in the next collective: a crash, still the cell's failure, never a pass.
SWALLOWED = [("other_model", Outcome.FAIL), ("truncated", Outcome.CRASH), ("missing_shard", Outcome.CRASH)]


@pytest.mark.parametrize(("variant", "outcome"), SWALLOWED, ids=[v for v, _ in SWALLOWED])
def test_the_corrupt_check_catches_a_load_that_swallows_the_library_s_error(
    pool: WorldPool, variant: str, outcome: Outcome
) -> None:
    """The row declares the corrupt check: its load raises on each damage, and a load that
    swallows the error and goes on with the fresh state fails the cell."""
    from conformance.adapters.torch_checkpointing import TORCH_CHECKPOINTING

    case = cell(TORCH_CHECKPOINTING, "corrupt", f"corrupt-{CELL}-{variant}")
    control = run_case(pool, case, backend="gloo", timeout_s=120, registered=TORCH_CHECKPOINTING)
    assert control.outcome is Outcome.PASS, control.detail
    broken = dataclasses.replace(TORCH_CHECKPOINTING, factory=broken_libraries.swallows_load_errors)
    result = run_case(pool, case, backend="gloo", timeout_s=120, registered=broken)
    assert result.outcome is outcome, result.detail
    assert "the load did not raise" in result.detail or "loaded a damaged checkpoint" in result.detail


def test_the_resharding_row_skips_exactly_the_saves_in_several_ranks(pool: WorldPool) -> None:
    """On gloo the skip covers the cells whose save runs in several ranks (the witness aside),
    and those are the ones that raise for CUDA: lifted, a skipped cell raises so, and a save in
    one rank, which the skip leaves alone, passes bit-exact."""
    import torch

    from conformance.adapters.torch_checkpointing import (
        RESHARD_CPU_WITNESS,
        TORCH_CHECKPOINTING_RESHARD,
        saving_ranks,
    )

    row = TORCH_CHECKPOINTING_RESHARD
    cells = [
        c
        for check in row.supports.checks
        for c in CHECKS[check].strategy_cells("default", row)
        if not row.unsupported_reason(c)
    ]
    skipped = {c.id for c in cells if row.skip_reason(c, "gloo")}
    assert skipped == {c.id for c in cells if saving_ranks(c) > 1 and c.id != RESHARD_CPU_WITNESS}
    assert all(row.skip_reason(c, "nccl") is None for c in cells)
    running = [c for c in cells if c.id not in skipped and c.id != RESHARD_CPU_WITNESS]
    assert {c.check for c in running} >= {"reshard", "roundtrip"}, sorted(c.id for c in running)
    lifted = dataclasses.replace(row, skips_on=None)
    one_rank = next(c for c in running if c.check == "reshard" and c.axes()["model"] == "mlp")
    result = run_case(pool, one_rank, backend="gloo", timeout_s=120, registered=lifted)
    assert result.outcome is Outcome.PASS, f"{one_rank.id}:\n{result.detail}"
    if not torch.cuda.is_available():
        several = next(
            c for c in cells if c.id in skipped and c.check == "reshard" and c.axes()["model"] == "mlp"
        )
        result = run_case(pool, several, backend="gloo", timeout_s=120, registered=lifted)
        assert result.outcome is Outcome.ERROR and "CUDA" in result.detail, f"{several.id}:\n{result.detail}"


def test_the_witness_cells_show_the_library_s_limits_here(pool: WorldPool) -> None:
    import torch

    from conformance.adapters.torch_checkpointing import (
        RESHARD_CPU_WITNESS,
        TORCH_CHECKPOINTING_DIRECT_IO,
        TORCH_CHECKPOINTING_RESHARD,
    )

    reshard = cell(TORCH_CHECKPOINTING_RESHARD, "roundtrip", RESHARD_CPU_WITNESS)
    result = run_case(pool, reshard, backend="gloo", timeout_s=120, registered=TORCH_CHECKPOINTING_RESHARD)
    if not torch.cuda.is_available():
        assert result.outcome is Outcome.ERROR and "CUDA" in result.detail, result.detail
    # its other saves in several ranks are skips on gloo, saying why
    assert "needs-cuda" in str(
        TORCH_CHECKPOINTING_RESHARD.skip_reason(dataclasses.replace(reshard, world_size=4), "gloo")
    )
    witness = cell(
        TORCH_CHECKPOINTING_DIRECT_IO,
        "roundtrip",
        CELL.replace("torch_checkpointing-", "torch_checkpointing_direct_io-", 1),
    )
    result = run_case(pool, witness, backend="gloo", timeout_s=120, registered=TORCH_CHECKPOINTING_DIRECT_IO)
    with tempfile.TemporaryDirectory() as tmp:
        refused = refuses_unaligned_direct_writes(tmp)
    want = Outcome.ERROR if refused else Outcome.PASS
    assert result.outcome is want, result.detail
    if refused:
        assert "Invalid argument" in result.detail, result.detail

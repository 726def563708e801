"""The torch-checkpointing adapter as a user runs it (pip install -e '.[libraries]'): the row
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
    reason="torch_checkpointing is not installed (pip install -e '.[libraries]')",
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
    # every other cell of that row is a skip on gloo, saying why
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

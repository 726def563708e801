"""A round-trip cell reproduced outside pytest, under torchrun (conformance.repro)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def torchrun(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_passing_cell_reproduces_under_torchrun() -> None:
    proc = torchrun("--nproc-per-node", "2", "-m", "conformance.repro", "fsdp2-dsd_sharded-dcp-adamw-mlp-w2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fsdp2-dsd_sharded-dcp-adamw-mlp-w2: bitwise equal after the round trip" in proc.stdout


def test_bad_requests_are_clear() -> None:
    from conformance.repro import find_case, main

    with pytest.raises(SystemExit, match="no round-trip cell 'nope'"):
        find_case("nope")
    with pytest.raises(SystemExit, match="run it under torchrun: torchrun --nproc-per-node 2"):
        main(["fsdp2-dsd_sharded-dcp-adamw-mlp-w2"])

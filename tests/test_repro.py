"""Cells reproduced outside pytest with torchrun as the launcher (conformance.repro)."""

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


def test_a_cell_of_two_worlds_reproduces_with_one_torchrun_per_world() -> None:
    """A known failure of torch 2.13 (DSD full turns AdamW betas into a list): the save runs
    in a torchrun of 2 ranks, the load in one of 1, and the outcome and its detail are the
    suite's."""
    cell = "reshard-ddp-dsd_full-torch_save-adamw-mlp-w2-to-w1"
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.repro", cell],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    starts = [line for line in proc.stdout.splitlines() if line.startswith("$ torchrun --standalone")]
    assert [s.split()[4] for s in starts] == ["2", "1"], proc.stdout
    assert f"{cell}: fail" in proc.stdout
    assert "type drift" in proc.stdout


def test_bad_requests_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.repro import find_cell, main

    with pytest.raises(SystemExit, match="no cell 'nope' in any profile"):
        find_cell("nope")
    monkeypatch.setenv("RANK", "0")  # as under torchrun
    with pytest.raises(SystemExit, match="spans several worlds"):
        main(["reshard-ddp-dsd_full-torch_save-adamw-mlp-w2-to-w1"])

"""Checkpoints across torch versions: the pairs, the carriage of the canonical state between
versions, and both sides run in this python (X -> X), passing, and failing when what the
saving side saw is not what the loading side gets."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance.versions.crossgrid import decode, encode
from conformance.versions.crossversion import pairs

ROOT = Path(__file__).resolve().parent.parent
ONLY = "ddp-sd_full-torch_save-*"


def test_pairs_are_each_with_itself_adjacent_both_ways_and_the_ends() -> None:
    assert pairs(["2.13.0", "2.9.1", "2.11.0"]) == [
        ("2.9.1", "2.9.1"),
        ("2.11.0", "2.11.0"),
        ("2.13.0", "2.13.0"),
        ("2.9.1", "2.11.0"),
        ("2.11.0", "2.9.1"),
        ("2.11.0", "2.13.0"),
        ("2.13.0", "2.11.0"),
        ("2.9.1", "2.13.0"),
        ("2.13.0", "2.9.1"),
    ]


@pytest.mark.parametrize(
    "tensor",
    [torch.randn(3, 4), torch.tensor(5.0), torch.zeros(0, 3), torch.randn(2, 3).bfloat16(), torch.arange(5)],
    ids=["fp32", "0-dim", "empty", "bf16", "int64"],
)
def test_the_canonical_state_crosses_versions_bit_for_bit(tensor: torch.Tensor) -> None:
    back = decode(pickle.loads(pickle.dumps(encode({"t": [tensor, (1, 2.5, None)]}))))
    got = back["t"][0]
    assert (got.dtype, got.shape) == (tensor.dtype, tensor.shape)
    assert got.reshape(-1).view(torch.uint8).tolist() == tensor.reshape(-1).view(torch.uint8).tolist()
    assert back["t"][1] == (1, 2.5, None)


def _side(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "conformance.versions.crossgrid", *args], cwd=ROOT, check=True, timeout=300
    )


def _outcomes(path: Path) -> dict[str, str]:
    return {c["id"]: c["outcome"] for c in json.loads(path.read_text())["cells"]}


def test_a_checkpoint_saved_and_loaded_by_this_torch_passes_and_a_changed_one_fails(tmp_path: Path) -> None:
    _side("save", "--out", str(tmp_path / "saved"), "--only", ONLY)
    _side("load", "--saved", str(tmp_path / "saved"), "--out", str(tmp_path / "ok.json"))
    v = torch.__version__.split("+")[0]
    cell = f"crossversion-{v}-to-{v}-ddp-sd_full-torch_save-adamw-mlp-w2"
    assert _outcomes(tmp_path / "ok.json") == {cell: "pass"}
    # what the saving side saw, one element changed: the load no longer matches it
    expected = tmp_path / "saved" / "ddp-sd_full-torch_save-adamw-mlp-w2" / "expected.pkl"
    state = decode(pickle.loads(expected.read_bytes()))
    key = next(k for k in state if k.startswith("param/"))
    state[key] = state[key].clone()
    state[key].view(-1)[0] += 1
    expected.write_bytes(pickle.dumps(encode(state)))
    _side("load", "--saved", str(tmp_path / "saved"), "--out", str(tmp_path / "changed.json"))
    assert _outcomes(tmp_path / "changed.json") == {cell: "fail"}


def test_the_grid_sets_cross_version_breaks_apart_from_what_each_version_does_alone() -> None:
    from conformance.outcome import CellResult, Outcome
    from conformance.report.crossversion import render_grid

    def cell(x: str, y: str, config: str, outcome: Outcome) -> CellResult:
        return CellResult(
            f"crossversion-{x}-to-{y}-{config}",
            {"check": "crossversion"},
            outcome,
            f"{outcome.value} why",
            0.0,
        )

    by_pair = {
        (v1, v2): [cell(v1, v2, "a-w2", Outcome.FAIL), cell(v1, v2, "b-w2", Outcome.PASS)]
        for v1, v2 in [("2.9.1", "2.9.1"), ("2.10.0", "2.10.0"), ("2.9.1", "2.10.0")]
    }
    by_pair[("2.10.0", "2.9.1")] = [
        cell("2.10.0", "2.9.1", "a-w2", Outcome.FAIL),
        cell("2.10.0", "2.9.1", "b-w2", Outcome.ERROR),
    ]
    page = render_grid(by_pair, [])
    across = page.split("## Across versions")[1].split("## What each version does alone")[0]
    alone = page.split("## What each version does alone")[1]
    assert "`b-w2` saved by 2.10.0, loaded by 2.9.1: **error**" in across and "a-w2" not in across
    assert "`a-w2`: **fail** in 2.9.1 -> 2.9.1, 2.9.1 -> 2.10.0, 2.10.0 -> 2.9.1, 2.10.0 -> 2.10.0" in alone

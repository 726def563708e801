"""publish --add: a strategy's rows join a published table without re-running it, and the
table says so; an addition from another torch, profile or a gated ci slice is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.outcome import CellResult, Outcome
from conformance.report.markdown import render_markdown
from conformance.report.results import read_results, results_document, write_results
from conformance.versions.supplement import SupplementError, supplement

ENV = {
    "torch": "2.13.0+cpu",
    "backend": "gloo",
    "device": "cpu",
    "matrix": "default",
    "suite_commit": "a" * 40,
}


def _cell(cell_id: str, outcome: Outcome) -> CellResult:
    axes = {"wrapper": "ddp", "sharding": "replicate", "api": "sd_full", "storage": "torch_save"}
    axes |= {"optimizer": "adamw", "model": "mlp", "world_size": 2, "precision": "fp32", "check": "roundtrip"}
    return CellResult(cell_id, axes, outcome, "detail", 0.1)


def _write(path: Path, env: dict[str, Any], cells: list[CellResult]) -> Path:
    write_results(path, results_document(env, cells))
    return path


def test_added_cells_join_the_table_and_the_table_says_so(tmp_path: Path) -> None:
    table = _write(
        tmp_path / "t.json",
        {**ENV, "strategies": {"torchtitan": {"torchtitan": "0.3.0"}}},
        [_cell("a", Outcome.PASS), _cell("ds-1", Outcome.ERROR)],
    )
    added_env = {
        **ENV,
        "suite_commit": "b" * 40,
        "time_utc": "now",
        "strategies": {"deepspeed": {"deepspeed": "0.19.8"}},
    }
    added = _write(tmp_path / "a.json", added_env, [_cell("ds-1", Outcome.PASS), _cell("ds-2", Outcome.FAIL)])
    env, cells = supplement(table, added, ["--strategy", "deepspeed"])
    by_id = {c.id: c.outcome for c in cells}
    assert by_id == {"a": Outcome.PASS, "ds-1": Outcome.PASS, "ds-2": Outcome.FAIL}
    assert env["suite_commit"] == "a" * 40  # the table's own run is still the table's
    assert set(env["strategies"]) == {"torchtitan", "deepspeed"}
    assert env["supplements"] == [
        {
            "suite_commit": "b" * 40,
            "time_utc": "now",
            "selection": ["--strategy", "deepspeed"],
            "added": 1,
            "replaced": 1,
        }
    ]
    page = render_markdown(env, cells)
    assert "1 added and 1 replaced by a run of `--strategy deepspeed` at suite bbbbbbbbbbbb" in page
    _write(tmp_path / "merged.json", env, cells)
    assert read_results(tmp_path / "merged.json")[0]["supplements"] == env["supplements"]


@pytest.mark.parametrize(
    ("table_env", "needle"),
    [
        ({**ENV, "torch": "2.15.0+cpu"}, "torch"),
        ({**ENV, "matrix": "ci"}, "matrix"),
        ({**ENV, "baseline": {"path": "b"}}, "baseline"),
    ],
)
def test_an_addition_of_another_table_is_refused(
    tmp_path: Path, table_env: dict[str, Any], needle: str
) -> None:
    table = _write(tmp_path / "t.json", table_env, [_cell("a", Outcome.PASS)])
    added = _write(tmp_path / "a.json", ENV, [_cell("b", Outcome.PASS)])
    with pytest.raises(SupplementError, match=needle):
        supplement(table, added, ["--strategy", "deepspeed"])


def test_an_addition_may_run_at_some_of_the_table_s_world_sizes_never_another() -> None:
    from conformance.versions.supplement import mismatch

    table = {"torch": "2.13.0", "matrix": "default", "world_sizes": [1, 2, 4, 8]}
    assert mismatch(table, {**table, "world_sizes": [2]}) == ""
    assert "world_sizes" in mismatch(table, {**table, "world_sizes": [2, 16]})

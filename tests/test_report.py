"""results.json and the Markdown matrix, from results alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from conformance.outcome import CellResult, Outcome, first_line
from conformance.report.markdown import render_markdown
from conformance.report.results import read_results, results_document, write_results

AXES = {
    "wrapper": "fsdp2",
    "sharding": "shard",
    "api": "dsd_full",
    "kind": "full",
    "storage": "dcp",
    "optimizer": "adamw",
    "model": "mlp",
    "precision": "fp32",
}
ENV = {"torch": "2.13.0", "backend": "gloo", "device": "cpu", "matrix": "ci"}


def cell(ws: int, outcome: Outcome, detail: str) -> CellResult:
    return CellResult(f"fsdp2-dsd_full-dcp-adamw-mlp-w{ws}", {**AXES, "world_size": ws}, outcome, detail, 0.5)


ERROR_DETAIL = """rank 0 raised RuntimeError first:
Traceback (most recent call last):
  File "x.py", line 1, in f
    value = msg.fn(ctx, msg.arg)
RuntimeError: setStorage: out of bounds
--- then rank 1 raised RuntimeError:
RuntimeError: Connection closed by peer"""


def test_results_round_trip_through_json(tmp_path: Path) -> None:
    cells = [cell(2, Outcome.FAIL, "x"), cell(1, Outcome.PASS, "ok")]
    write_results(tmp_path / "results.json", results_document(ENV, cells))
    env, back = read_results(tmp_path / "results.json")
    assert env == ENV
    assert [c.id for c in back] == sorted(c.id for c in cells)
    assert {c.outcome for c in back} == {Outcome.FAIL, Outcome.PASS}


def test_first_line_is_what_a_person_reads_first() -> None:
    assert first_line(ERROR_DETAIL) == "rank 0: RuntimeError: setStorage: out of bounds"
    fail = "3 differences after the round trip:\nfull state: param_groups/0/betas: type drift"
    assert (
        first_line(fail) == "3 differences after the round trip: full state: param_groups/0/betas: type drift"
    )
    assert first_line("rank 1 was killed by SIGSEGV (exit code -11)\n--- rank 1 output:") == (
        "rank 1 was killed by SIGSEGV (exit code -11)"
    )


def test_markdown_has_a_column_per_world_size_and_lists_non_passes() -> None:
    text = render_markdown(
        ENV,
        [cell(1, Outcome.PASS, "bitwise equal"), cell(2, Outcome.ERROR, ERROR_DETAIL)],
    )
    assert "**ERROR**" not in text and "refuses" in text  # the error's impact: it raised
    assert "- `fsdp2-dsd_full-dcp-adamw-mlp-w2`: error: rank 0: RuntimeError: setStorage" in text
    assert "never a pass" in text  # the legend says what unsupported means
    assert len(text.encode()) < 20_000  # a summary, no padding
    from conformance.report.html import render_html

    page = render_html(ENV, [cell(1, Outcome.PASS, "bitwise equal"), cell(2, Outcome.ERROR, ERROR_DETAIL)])
    assert "<th>w1</th>" in page and "<th>w2</th>" in page  # the grid per check, a column per world size


def test_baseline_written_from_results_reads_back(tmp_path: Path) -> None:
    from conformance.baseline import load_baseline, render_baseline

    cells = [cell(1, Outcome.PASS, "ok"), cell(2, Outcome.ERROR, ERROR_DETAIL)]
    path = tmp_path / "b.toml"
    path.write_text(render_baseline(cells, "header line"))
    loaded = load_baseline(path)
    assert list(loaded) == ["fsdp2-dsd_full-dcp-adamw-mlp-w1", "fsdp2-dsd_full-dcp-adamw-mlp-w2"]
    assert loaded["fsdp2-dsd_full-dcp-adamw-mlp-w1"].outcome is Outcome.PASS
    assert loaded["fsdp2-dsd_full-dcp-adamw-mlp-w2"].outcome is Outcome.ERROR
    assert "setStorage" in loaded["fsdp2-dsd_full-dcp-adamw-mlp-w2"].reason


def test_gzipped_results_read_transparently(tmp_path: Path) -> None:
    """A published table keeps results.json.gz: read_results takes it, the folder, or the
    results.json name it replaced; the gzip is the same bytes for the same document; render
    --fold --gzip turns a table's results.json into its results.json.gz."""
    from conformance.__main__ import main
    from conformance.report.results import gzip_results, results_file

    document = results_document(ENV, [cell(2, Outcome.FAIL, "x"), cell(1, Outcome.PASS, "ok")])
    write_results(tmp_path / "a" / "results.json.gz", document)
    write_results(tmp_path / "b" / "results.json.gz", document)
    assert (tmp_path / "a/results.json.gz").read_bytes() == (tmp_path / "b/results.json.gz").read_bytes()
    for name in ("a/results.json.gz", "a", "a/results.json"):
        env, back = read_results(tmp_path / name)
        assert env == ENV and len(back) == 2, name
    assert results_file(tmp_path / "a") == tmp_path / "a/results.json.gz"

    write_results(tmp_path / "c" / "results.json", document)
    assert gzip_results(tmp_path / "c") == tmp_path / "c/results.json.gz"
    assert not (tmp_path / "c/results.json").exists() and len(read_results(tmp_path / "c")[1]) == 2

    write_results(tmp_path / "d" / "results.json", document)
    assert main(["render", "--fold", "--gzip", str(tmp_path / "d" / "results.json")]) == 0
    assert not (tmp_path / "d/results.json").exists()
    assert len(read_results(tmp_path / "d/results.json.gz")[1]) == 2 and (tmp_path / "d/matrix.md").exists()


def test_folding_a_folded_table_again_changes_nothing(tmp_path: Path) -> None:
    """render --fold of a covering table already folded adds its declaration's unsupported cells
    once, never again (they were counted twice once)."""
    from conformance.__main__ import main

    folded = {"cells": 3, "rules": [{"check": "roundtrip", "reason": "why", "cells": 3}], "answers": []}
    env = {**ENV, "matrix": "default", "unsupported": folded}
    write_results(tmp_path / "results.json", results_document(env, [cell(2, Outcome.PASS, "ok")]))
    assert main(["render", "--fold", str(tmp_path / "results.json")]) == 0
    assert read_results(tmp_path / "results.json")[0]["unsupported"] == folded


def test_render_command_rebuilds_the_matrix_from_results(tmp_path: Path) -> None:
    from conformance.__main__ import main

    write_results(tmp_path / "results.json", results_document(ENV, [cell(2, Outcome.PASS, "ok")]))
    assert main(["render", str(tmp_path / "results.json")]) == 0
    assert (
        "| Round trip: save, load into a fresh model, compare | 1 | 1 |"
        in (tmp_path / "matrix.md").read_text()
    )
    assert main(["render", str(tmp_path / "missing.json")]) == 2


def test_first_line_of_a_wrapped_exception_is_the_carried_error() -> None:
    detail = """rank 2 raised CheckpointException first:
Traceback (most recent call last):
torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([3])
Traceback (most recent call last): (3, RuntimeError('Missing key'))
RuntimeError: Missing key in checkpoint state_dict: optim.param_groups.
--- then rank 0 raised CheckpointException:
RuntimeError: something else"""
    assert (
        first_line(detail)
        == "rank 2: RuntimeError: Missing key in checkpoint state_dict: optim.param_groups."
    )


def _named(cell_id: str, outcome: Outcome, detail: str = "d") -> CellResult:
    return CellResult(cell_id, {**AXES, "world_size": 2}, outcome, detail, 0.1)


def test_diff_sorts_changes_and_exits_nonzero_on_regressions(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from conformance.__main__ import main
    from conformance.report.diff import diff_runs

    old = [
        _named("a", Outcome.PASS),
        _named("b", Outcome.FAIL),
        _named("c", Outcome.FAIL),
        _named("d", Outcome.ERROR),
        _named("gone", Outcome.PASS),
    ]
    new = [
        _named("a", Outcome.FAIL, "1 differences after the round trip:\nparam/x: values differ"),
        _named("b", Outcome.PASS),
        _named("c", Outcome.CRASH),
        _named("d", Outcome.FAIL),
        _named("new", Outcome.PASS),
    ]
    diff = diff_runs(old, new)
    assert [(a.id, b.outcome) for a, b in diff.regressed] == [("a", Outcome.FAIL), ("c", Outcome.CRASH)]
    assert [(a.id, b.outcome) for a, b in diff.improved] == [("b", Outcome.PASS), ("d", Outcome.FAIL)]
    assert [c.id for c in diff.removed] == ["gone"] and [c.id for c in diff.added] == ["new"]

    write_results(tmp_path / "old.json", results_document({**ENV, "torch": "2.12.0"}, old))
    write_results(tmp_path / "new.json", results_document(ENV, new))
    assert main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 1
    out = capsys.readouterr().out
    assert "1 added, 1 removed, 2 improved, 2 regressed" in out
    assert out.index("Regressed:") < out.index("Improved:")
    assert "a: pass -> fail: 1 differences after the round trip: param/x: values differ" in out
    assert any(line.startswith("*") and "torch" in line for line in out.splitlines())
    assert main(["diff", str(tmp_path / "new.json"), str(tmp_path / "new.json")]) == 0


def test_gate_judges_each_outcome_against_its_expectation(tmp_path: Path) -> None:
    from conformance.baseline import Expectation, judge, load_baseline, version_matches

    ok = cell(2, Outcome.PASS, "ok")
    bad = cell(2, Outcome.FAIL, "x")
    assert judge(ok, Expectation(Outcome.PASS)).kind == "ok"
    assert judge(bad, Expectation(Outcome.PASS)).fails_the_gate  # an expected pass now fails
    assert judge(cell(2, Outcome.SKIP, "s"), Expectation(Outcome.PASS)).fails_the_gate  # no longer runs
    assert judge(bad, Expectation(Outcome.FAIL)).kind == "known"
    assert judge(cell(2, Outcome.CRASH, "c"), Expectation(Outcome.FAIL)).fails_the_gate  # another kind
    assert judge(ok, Expectation(Outcome.FAIL)).kind == "stale"
    assert judge(bad, None).kind == "new_failure"
    assert judge(ok, None).kind == "ok"
    assert version_matches("2.13.0+cpu", ">=2.6,<2.14") and not version_matches("2.14.1", ">=2.6,<2.14")
    path = tmp_path / "b.toml"
    path.write_text(
        'profile = "ci"\npasses = ["a"]\n\n["b"]\noutcome = "fail"\nreason = "r"\ntorch = "<2.13"\n\n'
        '["c"]\noutcome = "error"\nbackend = "nccl"\n'
    )
    baseline = load_baseline(path)
    assert baseline.profile == "ci" and len(baseline.sha256) == 64
    assert baseline.expected("a", "2.13.0", "gloo") == Expectation(Outcome.PASS)
    assert baseline.expected("b", "2.13.0", "gloo") is None  # condition excludes this torch
    assert baseline.expected("b", "2.12.1", "gloo") is not None
    assert baseline.expected("c", "2.13.0", "gloo") is None and baseline.expected("c", "2.13.0", "nccl")
    path.write_text('["b"]\noutcome = "fail"\ntorch = "about 2.13"\n')
    with pytest.raises(ValueError, match=r"is not like '>=2\.6'"):
        load_baseline(path)


def test_known_failures_show_as_known_with_reason_and_link() -> None:
    from conformance.baseline import Baseline, Expectation, known_failures
    from conformance.report.html import render_html

    cells = [cell(1, Outcome.PASS, "ok"), cell(2, Outcome.ERROR, ERROR_DETAIL)]
    link = "https://github.com/pytorch/pytorch/issues/1"
    baseline = Baseline({cells[1].id: Expectation(Outcome.ERROR, "offload on CPU", link)})
    known = known_failures(cells, baseline)
    assert list(known) == [cells[1].id]
    assert known_failures(cells, Baseline({cells[1].id: Expectation(Outcome.CRASH)})) == {}  # other kind
    text = render_markdown(ENV, cells, known)
    assert "known error" in text and f"known error (offload on CPU, {link})" in text
    page = render_html(ENV, cells, known)
    assert 'data-outcome="known"' in page and f'<a href="{link}">' in page


def _cell(outcome: Outcome, **axes: object) -> CellResult:
    merged = {**AXES, "world_size": 2, "check": "roundtrip", **axes}
    return CellResult(f"c-{sorted(merged.items())}", merged, outcome, "detail", 0.1)


def test_feature_table_says_yes_partial_no_unsupported_and_unknown() -> None:
    from conformance.baseline import Expectation
    from conformance.report.tables import feature_table, features

    cells = [
        _cell(Outcome.PASS),  # round trip: yes
        _cell(Outcome.PASS, optimizer="sgd"),  # optimizers: partial 1/2
        _cell(Outcome.FAIL, optimizer="adam"),
        _cell(Outcome.ERROR, model="tied_transformer"),  # tied weights: no
        _cell(Outcome.CRASH, model="bn_frozen"),  # buffers: known no
        _cell(Outcome.UNSUPPORTED, precision="bf16"),  # bf16: unsupported
        _cell(Outcome.SKIP, model="moe"),  # experts: skip
    ]
    known = {cells[4].id: Expectation(Outcome.CRASH)}
    headers, rows = feature_table(cells, known)
    assert headers == ["strategy", *(f.name for _, f in features())]
    assert len(rows) == 1 and rows[0][0] == "fsdp2-dsd_full-dcp"
    got = dict(zip(headers, rows[0]))
    assert got["round trip"] == "yes"
    assert got["optimizers"] == "partial 1/2"
    assert got["tied weights"] == "no"
    assert got["buffers"] == "known no"
    assert got["mixed prec."] == "unsupported"
    assert got["experts"] == "skip"
    # nothing of the run tests these: unknown, never "no"
    assert got["resume"] == got["hygiene"] == got["4 ranks"] == "unknown"


def test_interop_columns_name_the_loading_side_and_rows_the_saving_side() -> None:
    from conformance.report.html import render_html
    from conformance.report.tables import feature_table

    cell_ = _cell(Outcome.FAIL, check="interop", load_config="ddp-sd_full-torch_save")
    headers, rows = feature_table([cell_], {})
    by_strategy = {row[0]: dict(zip(headers, row)) for row in rows}
    assert by_strategy["fsdp2-dsd_full-dcp"]["interop out"] == "no"
    assert by_strategy["fsdp2-dsd_full-dcp"]["interop in"] == "unknown"
    assert by_strategy["ddp-sd_full-torch_save"]["interop in"] == "no"
    page = render_html(ENV, [cell_, _cell(Outcome.PASS)])
    assert 'id="features"' in page and 'id="interop"' in page
    assert "<th>ddp-sd_full-torch_save</th>" in page  # the grid's column: the loading config
    text = render_markdown(ENV, [cell_])
    assert "## Features by strategy" in text and "| interop |" not in text  # the grid: in the page


def test_a_run_of_properties_alone_says_why_its_feature_table_is_empty() -> None:
    """A property tests no feature of the table (its check is property-*): no empty table
    with headers alone, but a sentence pointing at the property tables."""
    from conformance.report.html import render_html
    from conformance.report.tables import NO_FEATURE_CELLS

    prop = _cell(Outcome.PASS, check="property-roundtrip", model="generated", optimizer="generated")
    assert NO_FEATURE_CELLS in render_markdown(ENV, [prop])
    assert NO_FEATURE_CELLS in render_html(ENV, [prop])
    assert NO_FEATURE_CELLS not in render_markdown(ENV, [prop, _cell(Outcome.PASS)])


def test_a_reshard_property_reads_as_its_direction() -> None:
    """property-reshard rows, like reshard rows, have a column per N-to-M direction."""
    from conformance.report.tables import check_table

    prop = _cell(Outcome.FAIL, check="property-reshard", save_world_size=1, load_world_size=2, world_size=1)
    headers, rows = check_table("property-reshard", [prop], {})
    assert "w1 to w2" in headers and rows[0][headers.index("w1 to w2")] == "fail"


def test_cells_that_hung_in_a_warm_world_are_listed_with_their_outcome() -> None:
    from conformance.report.write import rerun_summary

    note = "hung in a warm world after 7 other cells had run there, then ran in a fresh world: ok"
    rerun = dataclasses.replace(cell(2, Outcome.PASS, f"{note}\nbitwise equal\nSTACKS"), rerun=True)
    plain = cell(1, Outcome.PASS, "bitwise equal")
    # the field says it, not the text; results written before the field existed: the text
    assert not dataclasses.replace(rerun, rerun=False).hung_in_a_warm_world
    legacy = {k: v for k, v in rerun.to_json().items() if k != "rerun"}
    assert CellResult.from_json(legacy).hung_in_a_warm_world
    md = render_markdown(ENV, [rerun, plain])
    assert "## Cells that hung in a warm world" in md
    assert f"- `{rerun.id}`: pass: {note}" in md and f"`{plain.id}`: pass" not in md
    assert rerun_summary([rerun, plain]) == f"1 hung in a warm world and ran again in a fresh one: {rerun.id}"
    assert rerun_summary([plain]) is None
    assert "hung in a warm world" not in render_markdown(ENV, [plain])


def test_a_harness_error_is_a_regression_never_expected_and_listed_first(tmp_path: Path) -> None:
    from conformance.baseline import Expectation, judge, load_baseline, render_baseline
    from conformance.report.diff import diff_runs
    from conformance.report.markdown import render_markdown
    from conformance.report.write import outcome_summary

    fault = _named("h", Outcome.HARNESS_ERROR, "rank 0 raised RuntimeError first in the harness's own code:")
    diff = diff_runs(
        [_named("h", Outcome.FAIL), _named("s", Outcome.SKIP)], [fault, _named("s", Outcome.SKIP)]
    )
    assert [(a.id, b.outcome) for a, b in diff.regressed] == [("h", Outcome.HARNESS_ERROR)]
    assert judge(fault, Expectation(Outcome.HARNESS_ERROR)).fails_the_gate  # whatever a baseline says
    assert judge(fault, None).fails_the_gate
    path = tmp_path / "b.toml"
    path.write_text('["h"]\noutcome = "harness-error"\n')
    with pytest.raises(ValueError, match="fault of this suite"):
        load_baseline(path)
    assert '["h"]' not in render_baseline([fault], "header", findings=[])  # never written as expected
    cells = [_named("a", Outcome.PASS), fault]
    assert outcome_summary(cells).startswith("2 cells: 1 harness-error, 1 pass")
    page = render_markdown(ENV, cells)
    assert page.index("## Harness errors") < page.index("## Features by strategy")
    assert "Cells that did not pass" not in page  # not listed as the strategy's non-pass


def test_the_summary_folds_storages_into_family_and_api_and_folds_rows_where_nothing_ran() -> None:
    from conformance.case import Case
    from conformance.report.tables import summary_table

    def cell(wrapper: str, api: str, storage: str, outcome: Outcome, strategy: str = "") -> CellResult:
        case = Case(
            wrapper,
            "full_shard" if wrapper.startswith("fsdp1") else "replicate",
            api,
            storage,
            "adamw",
            "mlp",
            2,
        )
        axes = {**case.axes(), "strategy": strategy, "backend": "gloo"}
        return CellResult(case.id, axes, outcome, "x", 0.1)

    cells = [
        cell("fsdp1", "sd_full", "torch_save", Outcome.PASS),
        cell("fsdp1+orig", "sd_full", "dcp", Outcome.FAIL),  # another option and storage, same row
        cell("fsdp1", "legacy_full_rank0_init", "torch_save", Outcome.UNSUPPORTED),
        cell("ddp", "sd_full", "torch_save", Outcome.PASS),
    ]
    (headers, body), folded = summary_table(cells, {})
    rows = {row[0]: row[headers.index("round trip")] for row in body}
    assert rows == {"ddp sd_full": "yes", "fsdp1 sd_full": "partial 1/2"}
    assert folded == ["fsdp1 legacy_full_rank0_init"]

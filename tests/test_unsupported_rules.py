"""Unsupported is a rule, not a row (conformance.report.rules): a published run counts its
unsupported cells per (check, reason) and keeps the feature-table answers they give, never the
cells; the tables still say `unsupported` where only such cells answer; the diff compares the
counts. Each assertion can fail: a fold that kept the rows, or lost an answer, is caught."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.matrix import cells, unsupported_reason
from conformance.outcome import CellResult, Outcome
from conformance.report.rules import fold, folded_into, render_rule_changes, ruled_cells
from conformance.report.tables import feature_table
from conformance.report.write import write_reports

ENV = {"torch": "2.13.0", "backend": "gloo", "device": "cpu", "matrix": "default-product"}


def _result(case, outcome: Outcome, detail: str = "d") -> CellResult:  # type: ignore[no-untyped-def]
    return CellResult(case.id, {**case.axes(), "backend": "gloo"}, outcome, detail, 0.1)


def _corrupt_cells() -> list[CellResult]:
    return [
        _result(c, Outcome.UNSUPPORTED, reason)
        if (reason := unsupported_reason(c))
        else _result(c, Outcome.PASS)
        for c in cells("default-product", "corrupt")
    ]


def test_the_fold_counts_unsupported_cells_per_rule_and_keeps_none() -> None:
    results = _corrupt_cells()
    unsupported = [c for c in results if c.outcome is Outcome.UNSUPPORTED]
    kept, rules = fold(results)
    assert unsupported and not [c for c in kept if c.outcome is Outcome.UNSUPPORTED]
    assert len(kept) == len(results) - len(unsupported)
    assert rules["cells"] == len(unsupported) == sum(r["cells"] for r in rules["rules"])
    assert {r["reason"] for r in rules["rules"]} == {c.detail for c in unsupported}


def test_a_feature_only_unsupported_cells_answer_stays_unsupported_in_the_table() -> None:
    results = _corrupt_cells()
    before = feature_table(results, {})
    env, kept = folded_into(dict(ENV), results)
    after = feature_table(kept + ruled_cells(env), {})
    bare = feature_table(kept, {})  # without the rules: those answers would read "unknown"
    assert after == before
    assert bare != before and "unsupported" in str(before[1]) and "unsupported" not in str(bare[1])


def test_results_json_has_no_unsupported_row_and_the_page_says_the_rules(tmp_path: Path) -> None:
    write_reports(tmp_path, dict(ENV), _corrupt_cells(), findings=[])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["cells"] and not [c for c in data["cells"] if c["outcome"] == "unsupported"]
    assert data["environment"]["unsupported"]["cells"] > 0
    assert "Unsupported by design, not rows:" in (tmp_path / "matrix.md").read_text()


def test_the_diff_says_which_rules_changed_their_count() -> None:
    results = _corrupt_cells()
    env, kept = folded_into(dict(ENV), results)
    assert render_rule_changes(env, kept, env, kept) == []
    moved = next(c for c in results if c.outcome is Outcome.UNSUPPORTED)
    env2, kept2 = folded_into(dict(ENV), [c for c in results if c.id != moved.id])
    lines = render_rule_changes(env, kept, env2, kept2)
    assert lines and any("-> " in line and moved.detail.splitlines()[0][:30] in line for line in lines)


def test_the_history_says_when_cells_moved_between_supported_and_unsupported() -> None:
    """history compares the run cells of two tables; a cell that became a rule (or stopped being
    one) is no row there, so each step says how the rules' counts moved."""
    from conformance.report.history import Published, rule_note

    results = _corrupt_cells()
    env, kept = folded_into(dict(ENV), results)
    moved = next(c for c in results if c.outcome is Outcome.UNSUPPORTED)
    env2, kept2 = folded_into(dict(ENV), [c for c in results if c.id != moved.id])
    old = Published(Path("reports/torch-2.12.1-cpu-gloo/results.json.gz"), {**env, "torch": "2.12.1"}, kept)
    new = Published(Path("reports/torch-2.13.0-cpu-gloo/results.json.gz"), env2, kept2)
    assert rule_note(old, old) == ""
    note = rule_note(old, new)
    total = sum(r["cells"] for r in env["unsupported"]["rules"])
    assert f"{total} -> {total - 1} cells; 1 rules changed" in note, note


def _never_here(cell: object, backend: str) -> str:
    return "this strategy's code under test never runs here"


def test_a_cell_unsupported_by_design_is_a_rule_even_where_its_strategy_would_skip_it() -> None:
    """The runner and a covering run's fold ask the same question in the same order (the
    strategy's declaration, the matrix's rules, then skips): a cell the matrix refuses by design
    is unsupported, never a skip, even for a strategy that skips every cell here."""
    from conformance.case import Case
    from conformance.matrix.cells import why_unsupported
    from conformance.runner import run_case
    from conformance.strategy.registry import RegisteredStrategy, Registry, Supports
    from tests.broken import registered_control

    skipper = RegisteredStrategy(
        "skipper",
        registered_control,
        Supports(
            wrappers=(("fsdp1", "full_shard"),), kinds=("sharded",), checks=("roundtrip",), optimizers=None
        ),
        storage="dcp",
        skips_on=_never_here,
    )
    refused = Case("fsdp1", "full_shard", "sharded", "dcp", "adamw+groups", "mlp", 2, strategy="skipper")
    runnable = Case("fsdp1", "full_shard", "sharded", "dcp", "adamw", "mlp", 2, strategy="skipper")
    no_pool = None  # neither cell reaches a world
    ruled = run_case(no_pool, refused, backend="gloo", timeout_s=1, registered=skipper)  # type: ignore[arg-type]
    assert ruled.outcome is Outcome.UNSUPPORTED and "param groups" in ruled.detail, ruled.detail
    assert why_unsupported(Registry(builtin=False, strategies={"skipper": skipper}), refused) == ruled.detail
    skipped = run_case(no_pool, runnable, backend="gloo", timeout_s=1, registered=skipper)  # type: ignore[arg-type]
    assert skipped.outcome is Outcome.SKIP and "never runs here" in skipped.detail, skipped.detail

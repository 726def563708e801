"""Covering profiles (conformance.matrix.covering): the `default` profile loses no pair or
(layout, API, storage) triple of the supported full product, keeps every feature-table answer
and every finding's witness of its declaration, runs no unsupported cell, and picks the same
cells every time; the check that it lost nothing can fail, and so can the cost weighting."""

from __future__ import annotations

import pytest

from conformance.case import Transfer
from conformance.findings import load_findings
from conformance.matrix import CHECKS, cells, unsupported_reason
from conformance.matrix.cells import cover_late_last, feature_presets, witnesses
from conformance.matrix.costs import Costs, load_costs
from conformance.matrix.covering import cover_each_construction, lost

# the checks whose built-in cells are configurations (the lifecycle check has none: its cells are
# registered strategies' only)
CASE_CHECKS = [
    name for name in CHECKS if cells("ci", name) and not isinstance(cells("ci", name)[0], Transfer)
]


def _supported(profile: str, check: str) -> list:
    return [c for c in cells(profile, check) if not unsupported_reason(c)]


@pytest.mark.parametrize("check", CASE_CHECKS)
def test_default_loses_no_pair_or_triple_of_the_full_product(check: str) -> None:
    chosen = cells("default", check)
    assert chosen, check
    assert len({c.id for c in chosen}) == len(chosen), "a cell twice"
    assert not [c.id for c in chosen if unsupported_reason(c)]
    assert not lost(_supported("full", check), chosen)


def _answers(check: str, cases: list) -> set[tuple]:
    """The (full-table row, feature) answers the cells give: a row is the strategy, layout, API
    and storage."""
    return {
        (c.strategy, c.wrapper, c.sharding, c.api, c.storage, f.name)
        for c in cases
        for f in CHECKS[check].features
        if f.selects(c.axes())
    }


@pytest.mark.parametrize("check", CASE_CHECKS)
def test_default_keeps_every_feature_answer_of_its_declaration(check: str) -> None:
    answered = _answers(check, _supported("default-product", check))
    kept = _answers(check, cells("default", check))
    assert answered and answered <= kept, sorted(answered - kept)[:5]


def test_a_row_s_preset_is_a_cell_a_finding_names_where_there_is_one() -> None:
    """Where a finding names some cell of a (row, feature), a preset of that answer is one of
    those: the word the finding explains keeps a cell that can show it."""
    named = [f for f in load_findings() if not f.marks]
    run = _supported("default-product", "roundtrip")
    presets = feature_presets("roundtrip", run)
    flagged = [c for c in run if any(f.names(c.id) for f in named)]
    want = _answers("roundtrip", flagged)
    got = _answers("roundtrip", [c for c in presets if any(f.names(c.id) for f in named)])
    assert want and want <= got, sorted(want - got)[:3]


def test_default_runs_every_finding_s_witness_that_the_full_product_has() -> None:
    """Every witness of the built-in matrix, in the declaration or only in full (a finding a
    covering run found), is a cell of the default profile."""
    full = {c.id for name in CHECKS for c in cells("full", name)}
    covered = {c.id for name in CHECKS for c in cells("default", name)}
    witnesses = {w for f in load_findings() for w in f.witnesses if w in full}
    assert "hygiene-fsdp2-dsd_full-torch_save_to_dcp-adamw-bn_frozen-bf16-w1" in witnesses
    assert witnesses <= covered, sorted(witnesses - covered)


def test_transfers_are_the_declaration_s_in_a_covering_profile() -> None:
    for name in CHECKS:
        if name not in CASE_CHECKS:
            assert cells("default", name) == cells("default-product", name)


def test_a_covering_that_drops_a_cell_loses_what_only_it_covered() -> None:
    """The checker can fail: drop each chosen cell in turn until one leaves a pair uncovered."""
    universe = _supported("full", "corrupt")
    chosen = cells("default", "corrupt")
    assert any(lost(universe, chosen[:i] + chosen[i + 1 :]) for i in range(len(chosen)))


def test_the_choice_is_the_same_computed_afresh() -> None:
    """No state between calls: the cells are a function of the matrix and costs.json."""
    expected = [c.id for c in cells("default", "resume")]
    run = _supported("default-product", "resume")
    full = _supported("full", "resume")
    fresh = cover_late_last(run, full, lambda r, s: feature_presets("resume", r) + witnesses(r + s))
    assert [c.id for c in fresh] == expected


def test_the_covering_prefers_cheap_cells() -> None:
    """Weighted by measured cost, what the greedy adds to the presets costs less than what an
    unweighted one (every cell the same cost) adds, and the whole less than the product it
    replaced."""
    costs = load_costs()
    universe = _supported("full", "roundtrip")
    run = _supported("default-product", "roundtrip")
    presets = feature_presets("roundtrip", run) + witnesses(run + universe)
    weighted = cells("default", "roundtrip")
    flat = cover_each_construction(universe + presets, presets, costs=Costs({}))
    assert not lost(universe, flat)

    def total(cs: list) -> float:
        return sum(costs.of(c) for c in cs)

    forced = total(list(set(presets)))  # the same in both: what the greedy adds is compared
    assert total(weighted) - forced < total(flat) - forced, (total(weighted), total(flat), forced)
    assert total(weighted) < 0.6 * total(_supported("default-product", "roundtrip"))


def test_a_registered_strategy_is_covered_value_by_value() -> None:
    """Each value a registered strategy takes on each axis is met by one of its cells."""
    from conformance.matrix.cells import strategy_cells
    from conformance.strategy.registry import load_strategy

    strategy = load_strategy("tests.broken:CONTROL")
    full = [
        c
        for c in strategy_cells(strategy, "full", "roundtrip")
        if not unsupported_reason(c) and not strategy.unsupported_reason(c)
    ]
    chosen = strategy_cells(strategy, "default", "roundtrip")
    assert chosen and len(chosen) < len(full)
    assert not lost(full, chosen, strength=1)


def test_matrix_md_says_what_a_covering_profile_covers() -> None:
    from conformance.matrix import PROFILES
    from conformance.report.markdown import _profile

    default = PROFILES["default"]
    assert default.covering is not None
    profile = {"description": default.description, "covering": default.covering.says()}
    lines = _profile({"matrix": "default", "profile": profile})
    assert "Its cells cover every pair of axis values" in lines[0]
    assert _profile({"matrix": "default"}) == []  # a table published before the field


def test_a_covering_profile_s_properties_are_its_declaration_s() -> None:
    """The properties' bases come from the declaration run as a product, not from the covering."""
    from conformance.property import properties

    assert [p.id for p in properties("default")] == [p.id for p in properties("default-product")]


@pytest.mark.parametrize("check", CASE_CHECKS)
def test_ci_loses_no_pair_triple_or_answer_of_its_own_declaration(check: str) -> None:
    """ci covers its own declaration (ci-product): every pair and triple its supported cells
    combine, every answer of its tables and every witness it has."""
    chosen = cells("ci", check)
    product = _supported("ci-product", check)
    assert {c.id for c in chosen} <= {c.id for c in product} and not lost(product, chosen)
    assert _answers(check, product) <= _answers(check, chosen)
    assert {c.id for c in witnesses(product)} <= {c.id for c in chosen}


def test_every_broken_strategy_of_the_suite_is_caught_in_ci() -> None:
    """Each broken strategy of tests/ is held to a cell of the check meant to catch it; where the
    ci declaration has that cell, the ci profile runs it (its reference rows: matrix.profiles)."""
    from tests.test_broken_strategies import BROKEN, ONLY_THIS_CHECK

    held = [(f.__name__, cell) for f, cell, *_ in (*BROKEN, *ONLY_THIS_CHECK)]
    declared = {check: {c.id for c in cells("ci-product", check)} for check in CHECKS}
    ci = {check: {c.id for c in cells("ci", check)} for check in CHECKS}
    declared_ones = [(name, cell) for name, cell in held if cell.id in declared[cell.check]]
    assert len(declared_ones) >= 18, held  # not vacuous: most are cells of the ci declaration
    assert [(name, cell.id) for name, cell in declared_ones if cell.id not in ci[cell.check]] == []

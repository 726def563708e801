"""Covering profiles (conformance.matrix.covering): the `pairs` profile loses no pair or
(layout, API, storage) triple of the supported full product, keeps every feature-table answer
and every finding's witness of `default`, runs no unsupported cell, and picks the same cells
every time; the check that it lost nothing can fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.case import Transfer
from conformance.findings import load_findings
from conformance.matrix import CHECKS, cells, unsupported_reason
from conformance.matrix.cells import feature_presets, witnesses
from conformance.matrix.covering import cover, lost

CASE_CHECKS = [name for name in CHECKS if not isinstance(next(iter(cells("ci", name)), None), Transfer)]


def _supported(profile: str, check: str) -> list:
    return [c for c in cells(profile, check) if not unsupported_reason(c)]


@pytest.mark.parametrize("check", CASE_CHECKS)
def test_pairs_loses_no_pair_or_triple_of_the_full_product(check: str) -> None:
    chosen = cells("pairs", check)
    assert chosen, check
    assert len({c.id for c in chosen}) == len(chosen), "a cell twice"
    assert not [c.id for c in chosen if unsupported_reason(c)]
    assert not lost(_supported("full", check), chosen)


@pytest.mark.parametrize("check", CASE_CHECKS)
def test_pairs_keeps_every_feature_answer_of_default(check: str) -> None:
    answered = {
        (c.family, c.api, f.name)
        for c in feature_presets(check, _supported("default", check))
        for f in CHECKS[check].features
        if f.selects(c.axes())
    }
    kept = {
        (c.family, c.api, f.name)
        for c in cells("pairs", check)
        for f in CHECKS[check].features
        if f.selects(c.axes())
    }
    assert answered <= kept, sorted(answered - kept)[:5]


def test_pairs_runs_every_finding_s_witness_that_default_runs() -> None:
    default = {c.id for name in CHECKS for c in cells("default", name)}
    pairs = {c.id for name in CHECKS for c in cells("pairs", name)}
    witnesses = {f.witness for f in load_findings() if f.witness in default}
    assert witnesses and witnesses <= pairs, sorted(witnesses - pairs)


def test_transfers_are_default_s_in_a_covering_profile() -> None:
    for name in CHECKS:
        if name not in CASE_CHECKS:
            assert cells("pairs", name) == cells("default", name)


def test_a_covering_that_drops_a_cell_loses_what_only_it_covered() -> None:
    """The checker can fail: drop each chosen cell in turn until one leaves a pair uncovered."""
    universe = _supported("full", "corrupt")
    chosen = cells("pairs", "corrupt")
    assert any(lost(universe, chosen[:i] + chosen[i + 1 :]) for i in range(len(chosen)))


def test_the_choice_is_the_same_without_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Computed afresh (an empty cache directory) it picks the cells the profile has."""
    expected = [c.id for c in cells("pairs", "resume")]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    run = _supported("default", "resume")
    fresh = cover(_supported("full", "resume"), feature_presets("resume", run) + witnesses(run))
    assert list(tmp_path.rglob("*.json")), "the covering was not computed afresh"
    assert [c.id for c in fresh] == expected


def test_matrix_md_says_what_a_covering_profile_covers() -> None:
    from conformance.matrix import PROFILES
    from conformance.report.markdown import _profile

    pairs = PROFILES["pairs"]
    lines = _profile({"matrix": "pairs", "profile": {"description": pairs.description, "covering": True}})
    assert "a covering profile: every pair of axis values" in lines[0]
    assert _profile({"matrix": "default"}) == []  # a table published before the field

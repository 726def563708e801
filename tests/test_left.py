"""The diff says why each cell left a table (conformance.report.left): unsupported by design,
covered (every pair met by a new cell), values met, or not covered (listed); and whether each
finding of a removed failing cell is still shown. Each verdict can go the other way."""

from __future__ import annotations

import dataclasses

from conformance.findings import _finding
from conformance.matrix import cells, unsupported_reason
from conformance.outcome import CellResult, Outcome
from conformance.report.left import render_left, why_left


def _result(case, outcome: Outcome = Outcome.PASS, detail: str = "") -> CellResult:  # type: ignore[no-untyped-def]
    return CellResult(case.id, case.axes(), outcome, detail, 0.1)


def test_every_run_cell_that_left_the_default_declaration_is_covered() -> None:
    """The corrupt check's cells of the old default that the covering dropped: each one's pairs
    are met by a cell the covering runs; its unsupported ones are rules."""
    old = cells("default-product", "corrupt")
    new = {c.id for c in cells("default", "corrupt")}
    removed = [
        _result(c, Outcome.UNSUPPORTED if unsupported_reason(c) else Outcome.PASS)
        for c in old
        if c.id not in new
    ]
    left = why_left(removed, [_result(c) for c in cells("default", "corrupt")])
    assert left.covered and left.unsupported
    assert not left.not_covered and not left.values_met
    assert len(left.covered) + len(left.unsupported) == len(removed)


def test_a_cell_whose_value_no_new_cell_has_is_not_covered_and_listed() -> None:
    new = [_result(c) for c in cells("default", "corrupt")]
    lone = dataclasses.replace(cells("default", "corrupt")[0], optimizer="rprop")
    left = why_left([_result(lone)], new)
    assert [c.id for c, _ in left.not_covered] == [lone.id]
    text = "\n".join(render_left(left))
    assert "1 not covered" in text and f"{lone.id}: pass: nothing new meets" in text and "rprop" in text


def test_a_finding_of_a_removed_cell_is_still_shown_or_said_to_be_gone() -> None:
    case = cells("default", "corrupt")[0]
    finding = _finding(
        {"id": "x", "title": "t", "kind": "bug", "summary": "s", "cells": [f"{case.id}*"], "repro": "r.py"}
        | {"impact": "corrupts"},
        "test",
    )
    gone = _result(case, Outcome.FAIL, "1 differences")
    twin = dataclasses.replace(gone, id=case.id + "-twin")
    shown = why_left([gone], [twin], [finding])
    assert shown.findings == {"x": ([case.id], twin.id)}
    hidden = why_left([gone], [_result(case, Outcome.PASS)], [finding])
    assert hidden.findings == {"x": ([case.id], "")}
    assert "NO LONGER SHOWN" in "\n".join(render_left(hidden))


def test_history_compares_only_shared_cells_across_profiles_that_differ() -> None:
    """A covering table after a product one: the cells only one of them ran are not changes."""
    from pathlib import Path

    from conformance.report.history import Published, changed_cells, step_note

    a, b, c = cells("default", "corrupt")[:3]
    product = {"torch": "2.12.1", "matrix": "default"}
    covering = {"torch": "2.13.0", "matrix": "default", "profile": {"covering": "every pair"}}
    old = Published(Path("old/results.json"), product, [_result(a), _result(b, Outcome.FAIL, "x")])
    new = Published(Path("new/results.json"), covering, [_result(a, Outcome.FAIL, "y"), _result(c)])
    _, body = changed_cells(old, new)
    assert step_note(old, new).startswith(
        "The profiles differ (default (the product) -> default (a covering))"
    )
    assert [row[0] for row in body] == [a.id]  # b only in the old, c only in the new: not listed
    same = Published(Path("new/results.json"), product, new.cells)
    assert {row[0] for row in changed_cells(old, same)[1]} == {a.id, b.id, c.id} and not step_note(old, same)

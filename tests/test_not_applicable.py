"""n/a is its own answer (report.applicable): a feature-table entry no cell of the run answers is
n/a where no supported cell of the full declaration can have it (a rule's reason, or none declared
for the row) and stays unknown where one can, and a summary row over several strategies says
unknown where one of them is a debt, never n/a from the others."""

from __future__ import annotations

import functools

from conformance.case import Case
from conformance.outcome import CellResult, Outcome
from conformance.report.applicable import NO_CELL, with_not_applicable
from conformance.report.rules import ruled_cells
from conformance.report.tables import feature_table, summary_table
from conformance.strategy.registry import build_registry

FSDP2 = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 2)
DDP = Case("ddp", "replicate", "dsd_sharded", "dcp", "adamw", "mlp", 2)


def result(case: Case) -> CellResult:
    return CellResult(case.id, case.axes(), Outcome.PASS, "", 0.1)


@functools.cache
def answered() -> tuple[dict, list[CellResult]]:
    cells = [result(FSDP2), result(DDP)]
    env = with_not_applicable({}, cells, build_registry(["builtin"]))
    return env, cells


def words(row: str) -> dict[str, str]:
    env, cells = answered()
    headers, body = feature_table(cells + ruled_cells(env), {})
    (line,) = [r for r in body if r[0] == row]
    return dict(zip(headers[1:], line[1:]))


def reason(row: str, feature: str) -> str:
    env, _ = answered()
    return next(r for w, f, r in env["not_applicable"]["answers"] if (w, f) == (row, feature))


def test_a_feature_the_full_declaration_has_on_the_row_stays_unknown() -> None:
    assert words(FSDP2.config)["4 ranks"] == "unknown"  # the main slice at 4 ranks
    assert words(FSDP2.config)["round trip"] == "yes"


def test_a_feature_no_cell_of_the_row_can_have_is_na_with_the_rules_reason() -> None:
    assert words(DDP.config)["mixed prec."] == "n/a"
    assert "DDP has no mixed-precision setting" in reason(DDP.config, "mixed prec.")


def test_a_feature_whose_check_declares_nothing_for_the_row_is_na() -> None:
    assert words(FSDP2.config)["keep latest"] == "n/a"  # a library's lifecycle only
    assert reason(FSDP2.config, "keep latest") == NO_CELL


def test_a_summary_row_with_one_debt_is_unknown() -> None:
    env, cells = answered()
    stand_ins = ruled_cells(env)
    (headers, body), _ = summary_table(cells + stand_ins, {})
    (fsdp2,) = [r for r in body if r[0] == "fsdp2 dsd_sharded"]
    assert dict(zip(headers[1:], fsdp2[1:]))["4 ranks"] == "unknown"
    # the same summary row without the debt's stand-in reads n/a only where every row is n/a
    no_debt = [c for c in stand_ins if not c.id.startswith("unknown:")]
    (headers, body), _ = summary_table(cells + no_debt, {})
    (fsdp2,) = [r for r in body if r[0] == "fsdp2 dsd_sharded"]
    assert dict(zip(headers[1:], fsdp2[1:]))["keep latest"] == "n/a"

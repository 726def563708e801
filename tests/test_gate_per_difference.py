"""A known "no" must not hide a new one (issue 25): the gate judges every difference and error
of a cell the baseline expects to fail, and the tables say how bad the worst one is.

Each cell runs for real in a world of the pool; the baseline is written from one run with
`render_baseline` (what --update-baseline writes) and read back with `load_baseline`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conformance.baseline import judge, load_baseline, render_baseline
from conformance.case import Case
from conformance.findings import load_findings
from conformance.layout.builtin import builtin_strategy
from conformance.outcome import CellResult, Outcome
from conformance.report.impact import judge_cells
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken

# every tensor of it comes back bit-exact; AdamW's betas come back a list (dsd-full-betas-list)
DSD_FULL = Case("fsdp2", "shard", "dsd_full", "dcp", "adamw", "mlp", 2)
SHARDED = Case("fsdp2", "shard", "dsd_sharded", "torch_save_per_rank", "adamw", "mlp", 2)
FINDINGS = load_findings()


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def _run(pool: WorldPool, case: Case, factory: Callable, timeout_s: float = 60) -> CellResult:
    return run_case(pool, case, backend="gloo", timeout_s=timeout_s, strategy_factory=factory)


def _baseline(tmp_path: Path, result: CellResult, findings: list = FINDINGS):  # type: ignore[no-untyped-def]
    path = tmp_path / "baseline.toml"
    path.write_text(render_baseline([result], "test", findings=findings))
    return load_baseline(path, findings=findings)


def test_the_known_drift_is_recorded_per_difference(pool: WorldPool, tmp_path: Path) -> None:
    known = _run(pool, DSD_FULL, builtin_strategy)
    assert known.outcome is Outcome.FAIL, known.detail
    kinds = {(r.scope, r.kind, r.key) for r in known.records}
    assert ("full state", "type", "param_groups/0/betas") in kinds
    assert {r.kind for r in known.records} == {"type"}
    entry = _baseline(tmp_path, known).entries[DSD_FULL.id]
    assert entry.findings == ("dsd-full-betas-list",) and entry.unexplained == ()


def test_a_second_real_difference_inside_a_known_failure_fails_the_gate(
    pool: WorldPool, tmp_path: Path
) -> None:
    baseline = _baseline(tmp_path, _run(pool, DSD_FULL, builtin_strategy))
    worse = _run(pool, DSD_FULL, broken.zeroes_moments)
    assert worse.outcome is Outcome.FAIL  # the same outcome word as the known failure
    verdict = judge(worse, baseline.entries[DSD_FULL.id], baseline.findings)
    assert verdict.fails_the_gate and verdict.kind == "new_difference", verdict.message
    assert "exp_avg" in verdict.message and "values in full state" in verdict.message
    assert "first at index" in verdict.message
    # the same differences again (a second run of the known failure) hold the gate
    again = judge(_run(pool, DSD_FULL, builtin_strategy), baseline.entries[DSD_FULL.id], baseline.findings)
    assert again.kind == "known", again.message


def test_unexplained_differences_are_remembered_by_signature(pool: WorldPool, tmp_path: Path) -> None:
    """A strategy of one's own has no findings: its known differences are kept as signatures;
    the same ones hold the gate, one more fails it."""
    drift = _run(pool, SHARDED, broken.tuples_become_lists)
    assert drift.outcome is Outcome.FAIL, drift.detail
    baseline = _baseline(tmp_path, drift, findings=[])
    entry = baseline.entries[SHARDED.id]
    assert entry.findings == () and any("betas" in s for s in entry.unexplained)
    assert judge(_run(pool, SHARDED, broken.tuples_become_lists), entry, []).kind == "known"
    verdict = judge(_run(pool, SHARDED, broken.zeroes_moments), entry, [])
    assert verdict.kind == "new_difference" and "exp_avg" in verdict.message, verdict.message


def test_a_known_error_whose_exception_changes_fails_the_gate(pool: WorldPool, tmp_path: Path) -> None:
    known = _run(pool, SHARDED, broken.load_raises_key_error)
    assert known.outcome is Outcome.ERROR, known.detail
    (record,) = known.records
    assert (record.kind, record.key) == ("error", "strategy.load") and record.message.startswith("KeyError")
    baseline = _baseline(tmp_path, known, findings=[])
    entry = baseline.entries[SHARDED.id]
    assert judge(_run(pool, SHARDED, broken.load_raises_key_error), entry, []).kind == "known"
    changed = judge(_run(pool, SHARDED, broken.load_raises_value_error), entry, [])
    assert changed.kind == "new_difference" and "ValueError" in changed.message, changed.message


def test_an_outcome_only_entry_keeps_its_old_meaning(pool: WorldPool, tmp_path: Path) -> None:
    path = tmp_path / "old.toml"
    path.write_text(f'["{DSD_FULL.id}"]\noutcome = "fail"\nreason = "betas"\n')
    baseline = load_baseline(path, findings=FINDINGS)
    assert baseline.outcome_only == (DSD_FULL.id,)
    worse = _run(pool, DSD_FULL, broken.zeroes_moments)
    assert judge(worse, baseline.entries[DSD_FULL.id], baseline.findings).kind == "known"


@pytest.mark.parametrize(
    ("factory", "case", "impact"),
    [
        (broken.nudges_one_element, SHARDED, "corrupts"),
        (broken.forgets_optimizer, SHARDED, "loses"),
        (broken.tuples_become_lists, SHARDED, "drifts"),
        (broken.load_raises_key_error, SHARDED, "refuses"),
        (broken.crashes_on_save, SHARDED, "crashes"),
        (broken.hangs_on_load, SHARDED, "hangs"),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else None,
)
def test_each_impact_class_is_classified(pool: WorldPool, factory: Callable, case: Case, impact: str) -> None:
    result = _run(pool, case, factory, timeout_s=20 if impact == "hangs" else 60)
    assert result.outcome is not Outcome.PASS, result.detail
    assert judge_cells([result], [])[result.id].impact == impact, result.records


def test_the_gate_through_pytest_names_a_new_difference_in_a_known_failure(tmp_path: Path) -> None:
    """As a maintainer runs it: a registered strategy whose cells already fail on the betas
    drift writes its baseline with --update-baseline; the same strategy, changed to zero AdamW's
    moments after its load, fails the gate, naming exp_avg; unchanged, it passes the gate."""
    from tests.test_plugin import run_cases

    baseline = tmp_path / "baseline.toml"
    select = ("--strategy", "tests.broken:FULL_DRIFT", "--matrix", "ci", "-k", "test_roundtrip", "-n", "0")
    code, results, log = run_cases(
        tmp_path, *select, "--baseline", str(baseline), "--update-baseline", name="write"
    )
    failing = [c for c in results["cells"] if c["outcome"] == "fail"]
    assert failing and all({o["kind"] for o in c["observed"]} == {"type"} for c in failing), log
    assert 'findings = ["dsd-full-betas-list"]' not in baseline.read_text()  # not a cell of that finding
    assert "param_groups/0/betas" in baseline.read_text()  # remembered by signature
    code, _, log = run_cases(tmp_path, *select, "--baseline", str(baseline), name="same")
    assert code == 0, log
    zeroed = ("--strategy", "tests.broken:FULL_DRIFT_ZEROED", *select[2:])
    code, _, log = run_cases(tmp_path, *zeroed, "--baseline", str(baseline), name="zeroed")
    assert code == 1, log
    assert "new difference: values in full state, key optim/fc1.weight/exp_avg" in log, log


def test_a_signature_keeps_what_a_difference_is_not_how_big_or_where_an_event_struck() -> None:
    """The numbers of elements, which rank raised or died first and how long a hang waited do
    not change what the baseline remembers; the key, kind, scope, exception and signal do."""
    from conformance.observed import Observed

    values = Observed("full state", "values", "optim/fc1.weight/exp_avg", None, "values differ", 3, (0, 1))
    assert (
        values.signature
        == Observed("full state", "values", "optim/fc1.weight/exp_avg", None, "x", 9, (2,)).signature
    )
    assert values.signature != Observed("full state", "values", "optim/fc1.weight/exp_avg_sq").signature
    error = Observed("load phase", "error", "strategy.load", 1, "KeyError: 0")
    assert error.signature == Observed("load phase", "error", "strategy.load", 0, "KeyError: 'x'").signature
    assert error.signature != Observed("load phase", "error", "strategy.load", 1, "ValueError: 0").signature
    crash = Observed("cell", "crash", "", 1, "was killed by SIGSEGV (exit code -11); also rank 0 exited")
    assert (
        crash.signature == Observed("cell", "crash", "", 0, "was killed by SIGSEGV (exit code -11)").signature
    )
    assert (
        crash.signature != Observed("cell", "crash", "", 0, "was killed by SIGABRT (exit code -6)").signature
    )
    hang = Observed("cell", "hang", "", None, "timed out after 60 s; ranks [0] did not finish")
    assert hang.signature == Observed("cell", "hang", "", None, "timed out after 20 s; ranks [1]").signature


def test_only_failing_entries_without_findings_are_outcome_only(tmp_path: Path) -> None:
    """--update-baseline writes unsupported and skipped cells without findings (they record
    nothing): the gate's warning about entries it cannot look inside counts failing ones only."""
    from conformance.baseline import load_baseline

    path = tmp_path / "b.toml"
    path.write_text(
        'profile = "ci"\npasses = []\n\n'
        '["a-unsupported"]\noutcome = "unsupported"\nreason = "by design"\n\n'
        '["b-skip"]\noutcome = "skip"\nreason = "not here"\n\n'
        '["c-fail"]\noutcome = "fail"\nreason = "old form"\n'
    )
    assert load_baseline(path).outcome_only == ("c-fail",)

"""Findings as data: every bug has a standalone reproduction that still reproduces, and the
reports and the baseline say which finding explains which cell."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.baseline import render_baseline
from conformance.findings import FINDINGS_PATH, load_findings
from conformance.outcome import CellResult, Outcome
from conformance.report.findings_md import render_findings
from conformance.versions import reproduce

ROOT = Path(__file__).resolve().parent.parent
FINDINGS = load_findings()
BUGS = [f for f in FINDINGS if f.kind == "bug"]


def test_the_published_findings_are_valid_and_every_bug_has_a_script() -> None:
    assert FINDINGS_PATH.exists() and BUGS
    for finding in BUGS:
        script = ROOT / finding.repro
        assert script.exists(), f"{finding.id}: no {finding.repro}"
        text = script.read_text()
        assert "conformance" not in text.replace("reports/findings", ""), f"{finding.repro} uses the suite"
        assert finding.torch, f"{finding.id}: the torch versions it was seen on"


@pytest.mark.parametrize("finding", BUGS, ids=lambda f: f.id)
def test_each_bug_still_reproduces_without_the_suite(finding) -> None:  # type: ignore[no-untyped-def]
    """The script exits 1 and says BUG PRESENT. Where reports/findings/verified.json records a
    run that did, of this script as it is now, under this torch and these frameworks
    (`python -m conformance reproduce`), the test is a skip that says so: only a script changed
    since, or another torch, runs here (CONFORMANCE_RERUN_REPRO=1: every one runs)."""
    missing = reproduce.missing_frameworks(finding)
    if missing:
        pytest.skip(f"{finding.repro} needs {missing}")
    record = None if os.environ.get("CONFORMANCE_RERUN_REPRO") else reproduce.record_of(finding, ROOT)
    if record is not None:
        pytest.skip(  # one reason for all, so that -ra lists them as one line
            f"reproduced on torch {record['torch']}, the script unchanged since "
            f"({reproduce.VERIFIED} says when; CONFORMANCE_RERUN_REPRO=1 runs it)"
        )
    try:
        run = reproduce.run_script(finding, ROOT)
    except reproduce.Unavailable as exc:
        pytest.skip(str(exc))
    if run.cannot_show_here:  # a filesystem or device it needs
        pytest.skip(run.cannot_show_here)
    if run.returncode == 0:
        pytest.fail(
            f"{finding.id} no longer reproduces on this torch: update reports/findings.toml\n{run.output}"
        )
    assert run.reproduced, run.output  # 2: the script itself failed


def test_a_changed_script_is_not_taken_as_recorded(tmp_path: Path) -> None:
    """A record names the script's bytes, its torch and its frameworks: change any, and the
    script runs again."""
    finding = next(f for f in BUGS if not f.repro_pair and not f.repro_torch and not f.frameworks)
    script = tmp_path / finding.repro
    script.parent.mkdir(parents=True)
    script.write_text("print('BUG PRESENT'); raise SystemExit(1)\n")
    (tmp_path / reproduce.VERIFIED).parent.mkdir(parents=True, exist_ok=True)
    record = {
        "finding": finding.id,
        "torch": reproduce.torch_key(finding),
        "sha256": reproduce.sha256(finding, tmp_path),
        "frameworks": {},
        "utc": "now",
    }
    reproduce.save_records([record], tmp_path)
    assert reproduce.record_of(finding, tmp_path) == record
    assert reproduce.run_script(finding, tmp_path).reproduced
    script.write_text("print('BUG PRESENT'); raise SystemExit(1)  # changed\n")
    assert reproduce.record_of(finding, tmp_path) is None
    reproduce.save_records([{**record, "torch": "0.0.0"}], tmp_path)
    script.write_text("print('BUG PRESENT'); raise SystemExit(1)\n")
    assert reproduce.record_of(finding, tmp_path) is None


def _cell(cell_id: str, outcome: Outcome, detail: str) -> CellResult:
    return CellResult(cell_id, {"world_size": 2}, outcome, detail, 0.1)


BETAS = "3 differences after the round trip:\nfull state: param_groups/0/betas: type drift: expected tuple"


def test_a_finding_explains_its_cells_only_and_never_a_harness_error() -> None:
    betas = next(f for f in FINDINGS if f.id == "dsd-full-betas-list")
    assert betas.explains(_cell("fsdp2-dsd_full-dcp-adamw-mlp-w2", Outcome.FAIL, BETAS))
    assert not betas.explains(_cell("fsdp2-dsd_full-dcp-adamw-mlp-w2", Outcome.FAIL, "values differ"))
    assert not betas.explains(_cell("fsdp2-dsd_sharded-dcp-adamw-mlp-w2", Outcome.FAIL, BETAS))
    assert not betas.explains(_cell("fsdp2-dsd_full-dcp-adamw-mlp-w2", Outcome.HARNESS_ERROR, BETAS))


def test_findings_md_and_the_baseline_name_the_finding_and_list_what_none_explains() -> None:
    cells = [
        _cell("fsdp2-dsd_full-dcp-adamw-mlp-w2", Outcome.FAIL, BETAS),
        _cell(
            "fsdp2-dsd_sharded-dcp-adamw-mlp-w2",
            Outcome.FAIL,
            "1 differences:\nfull state: param/x: values differ",
        ),
        _cell("fsdp2-dsd_sharded-dcp-sgd-mlp-w2", Outcome.PASS, "bitwise equal"),
    ]
    page = render_findings({"torch": "2.13.0"}, cells, FINDINGS)
    section = page.split("## Differences no finding explains")[1]
    assert "fsdp2-dsd_sharded-dcp-adamw-mlp-w2" in section and "fsdp2-dsd_full" not in section
    assert "values: full state: param/x: values differ" in section  # per difference
    assert "python reports/findings/repro/dsd_full_betas_list.py" in page
    toml = render_baseline(cells, "header", "ci", findings=FINDINGS)
    assert 'reason = "bug: get/set_state_dict with full_state_dict turns' in toml


def test_a_bug_without_a_reproduction_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "findings.toml"
    bad.write_text('[[finding]]\nid = "x"\ntitle = "t"\nkind = "bug"\nsummary = "s"\ncells = ["*"]\n')
    with pytest.raises(ValueError, match="standalone reproduction"):
        load_findings(bad)


def test_no_finding_says_milder_than_the_differences_it_explains() -> None:
    """A finding that does not select its records by kind or key declares its impact at worst:
    never milder than what a record it explains shows by its kind, in any published table."""
    from conformance.findings import attribute
    from conformance.observed import IMPACTS
    from conformance.report.results import read_results

    order = list(IMPACTS)
    milder = set()
    for results in sorted((ROOT / "reports").glob("torch-*/results.json*")):
        for cell in read_results(results)[1]:
            for record, found in attribute(cell, FINDINGS).records:
                for finding in found:
                    if (
                        not finding.selects
                        and record.impact
                        and order.index(finding.impact) > order.index(record.impact)
                    ):
                        milder.add((finding.id, finding.impact, record.impact, results.parent.name))
    assert not milder, sorted(milder)


def test_a_marking_finding_explains_no_difference() -> None:
    deprecated = next(f for f in FINDINGS if f.marks)
    cell = CellResult(
        "fsdp1_full_shard-legacy_full-torch_save-adamw-mlp-w2",
        {},
        Outcome.ERROR,
        "rank 0 raised KeyError first in strategy.load:\nKeyError: 0",
        1.0,
    )
    assert deprecated.covers(cell) and deprecated.about(cell) and not deprecated.explains(cell)


def test_an_error_is_a_refusal_unless_its_finding_says_it_follows_silent_harm() -> None:
    """An error after a silent loss (a param group's lr dropped on load, KeyError at the next
    step) is the loss; a crash a finding calls "refuses" stays a crash."""
    from conformance.findings import record_impact
    from conformance.observed import Observed

    by_id = {f.id: f for f in FINDINGS}
    error = Observed("[run B]", "error", "optimizer step", message="KeyError: 'betas'")
    crash = Observed("cell", "crash", message="rank 1 died of SIGSEGV")
    assert record_impact(error, []) == "refuses"
    assert record_impact(error, [by_id["dcp-pipeline-param-groups-lost"]]) == "loses"
    assert record_impact(crash, [by_id["fsdp1-full-offload-cpu-crash"]]) == "crashes"


LBFGS_INIT = """[save phase, 2 ranks] rank 0 raised TypeError first in strategy.save:
Traceback (most recent call last):
  File "site-packages/olmo_core/distributed/checkpoint/__init__.py", line 97, in save_model_and_optim_state
    optim_state = get_optimizer_state_dict(model, optim)
  File "site-packages/torch/distributed/checkpoint/state_dict.py", line 1042, in get_optimizer_state_dict
    _init_optim_state(optim)
  File "site-packages/torch/distributed/checkpoint/state_dict.py", line 640, in _init_optim_state
    optim.step(closure=None)
  File "site-packages/torch/optim/lbfgs.py", line 330, in step
    orig_loss = closure()
TypeError: 'NoneType' object is not callable"""


def test_a_torch_finding_explains_a_registered_row_by_what_its_cell_does() -> None:
    """A finding about torch matches a cell by what it does (the optimizer, the API its traceback
    reaches, the error), not by the strategy's name: a library row never seen before, whose
    LBFGS cell reaches DSD's _init_optim_state, is explained; the same error from elsewhere is
    not."""
    lbfgs = next(f for f in FINDINGS if f.id == "dsd-init-optim-state-lbfgs-closure")
    cell = "newlib-fsdp2-sharded-newlib-lbfgs-mlp-w2"
    assert lbfgs.explains(_cell(cell, Outcome.ERROR, LBFGS_INIT))
    elsewhere = LBFGS_INIT.replace("_init_optim_state", "own_init_step")
    assert not lbfgs.explains(_cell(cell, Outcome.ERROR, elsewhere))
    assert not lbfgs.explains(_cell(cell.replace("lbfgs", "adamw"), Outcome.ERROR, LBFGS_INIT))

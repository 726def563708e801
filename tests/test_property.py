"""Properties: generated models and schedules run as cells, and a failure shrinks to the
smallest failing configuration, with its cell id and a repro that finds that cell again."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

from conformance.case import Case
from conformance.generated import ModelSpec, ScheduleSpec
from conformance.layout.builtin import builtin_strategy
from conformance.matrix import cells
from conformance.outcome import Outcome
from conformance.property import Property, properties, run_property
from conformance.repro import find_cell
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken

BASE = next(c for c in cells("ci", "roundtrip") if c.id == "fsdp2-dsd_sharded-dcp-adamw-mlp-w2")
FEW = settings(max_examples=6, derandomize=True, database=None, deadline=None, phases=list(Phase))


def test_names_round_trip_and_never_hold_a_hyphen() -> None:
    model = ModelSpec((5, 1, 7), (True, False), (False, True))
    schedule = ScheduleSpec("adamw", 0.03, steps=2, weight_decay=0.1, beta1=0.8, scheduler=True)
    assert ModelSpec.parse(model.name) == model and ScheduleSpec.parse(schedule.name) == schedule
    assert "-" not in model.name + schedule.name
    with pytest.raises(ValueError, match="tied"):
        ModelSpec((3, 4, 5), (True, True), (False, False), tied=True)


def test_properties_cover_each_check_and_are_stable() -> None:
    props = properties("ci")
    assert [p.id for p in props] == sorted(p.id for p in props) == [p.id for p in properties("ci")]
    assert {p.check for p in props} == {"roundtrip", "reshard", "resume"}
    assert all(p.id.startswith(f"property-{p.check}-") for p in props)


def test_a_generated_cell_is_found_again_by_its_id() -> None:
    prop = next(p for p in properties("ci") if p.check == "resume")
    cell = prop.instantiate("gen_3x1_b1_w1", "sgd_lr0.01_m0.9_s2_sched")
    assert isinstance(cell, Case) and find_cell(cell.id) == cell


def _run(factory, prop: Property, examples: settings):  # type: ignore[no-untyped-def]
    with WorldPool() as pool:
        return run_property(
            prop,
            lambda cell: run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=factory),
            "gloo",
            factory=factory,
            settings=examples,
        )


def test_without_a_shrink_phase_the_first_failure_is_reported_as_such() -> None:
    no_shrink = settings(FEW, max_examples=6, phases=[Phase.generate])
    result = _run(broken.loses_odd_rows, Property(BASE), no_shrink)
    assert result.outcome is Outcome.FAIL and not result.axes["shrunk"]
    assert (
        result.detail.startswith("first failing configuration: model gen_") and "not shrunk" in result.detail
    )
    # hypothesis replays the failing example once more: one configuration, not two
    assert "(1 of " in result.detail and " configurations tried failed" in result.detail, result.detail


def test_the_control_passes_on_every_example() -> None:
    result = _run(builtin_strategy, Property(BASE), FEW)
    assert result.outcome is Outcome.PASS, result.detail
    assert result.axes["examples"] == 6 and "6 generated configurations" in result.detail
    assert result.axes["model"] == result.axes["optimizer"] == "generated"  # not the base cell's


def test_a_shape_dependent_bug_shrinks_to_the_minimal_model() -> None:
    """Only parameters of odd first dimension above 1 break: the smallest such model is one
    Linear(1, 3) without bias, and that is what the property reports, with its cell and repro."""
    result = _run(broken.loses_odd_rows, Property(BASE), settings(FEW, max_examples=30))
    assert result.outcome is Outcome.FAIL, result.detail
    assert result.axes["minimal_model"] == "gen_1x3_b0_w0" and result.axes["shrunk"], result.detail
    assert result.detail.startswith("minimal failing configuration: model gen_1x3_b0_w0, optimizer sgd_")
    cell = result.axes["minimal_cell"]
    assert f"repro: torchrun --nproc-per-node 2 -m conformance.repro {cell}" in result.detail
    assert find_cell(cell).id == cell


def test_a_property_id_is_not_a_cell_and_its_report_replays_the_minimal_one() -> None:
    from conformance.outcome import CellResult
    from conformance.report.html import render_html

    prop = next(p for p in properties("ci") if p.check == "resume")
    minimal = prop.instantiate("gen_1x1_b0_w0", "sgd_lr0.01_m0.9_s1")
    with pytest.raises(SystemExit, match="minimal_cell"):
        find_cell(prop.id)
    axes = {**prop.axes("gloo"), "world_size": 2, "minimal_cell": minimal.id}
    page = render_html({"torch": "2.13.0"}, [CellResult(prop.id, axes, Outcome.FAIL, "minimal ...", 1.0)])
    assert f"python -m conformance.repro {minimal.id}</code>" in page  # a resume: two torchruns


def _stub_results(first_outcome: Outcome, first_detail: str, rerun: bool = False):  # type: ignore[no-untyped-def]
    """A run_cell that answers each configuration's first run with `first_outcome` and every
    later run with a pass: what a cell that fails only now and then looks like to hypothesis."""
    from conformance.outcome import CellResult

    seen: set[str] = set()

    def run_cell(cell):  # type: ignore[no-untyped-def]
        first = cell.id not in seen
        seen.add(cell.id)
        if first:
            return CellResult(cell.id, cell.axes(), first_outcome, first_detail, 0.1, rerun=rerun)
        return CellResult(cell.id, cell.axes(), Outcome.PASS, "bitwise equal", 0.1)

    return run_cell


def test_a_failure_that_does_not_happen_again_is_reported_flaky_not_passed() -> None:
    run_cell = _stub_results(Outcome.HANG, "timed out after 60 s")
    result = run_property(Property(BASE), run_cell, "gloo", settings=settings(FEW, max_examples=3))
    assert result.outcome is Outcome.HANG, result.detail  # a result, never an escaped exception
    assert result.detail.startswith("flaky configuration: model gen_"), result.detail
    assert (
        ": hang on its first run, then pass" in result.detail
        and "when hypothesis ran it again" in result.detail
    )
    assert "repro: torchrun" in result.detail and result.detail.endswith("hang: timed out after 60 s")
    assert find_cell(result.axes["minimal_cell"]).id == result.axes["minimal_cell"]


def test_a_pass_says_how_many_examples_passed_only_in_a_fresh_world() -> None:
    from conformance.outcome import RERUN_NOTE

    run_cell = _stub_results(Outcome.PASS, f"{RERUN_NOTE} after 3 other cells had run there, ...", rerun=True)
    result = run_property(Property(BASE), run_cell, "gloo", settings=settings(FEW, max_examples=3))
    assert result.outcome is Outcome.PASS, result.detail
    assert f"3 of them {RERUN_NOTE} and passed in a fresh one, e.g. fsdp2-" in result.detail


def test_a_property_none_of_whose_examples_can_run_here_is_a_skip_with_the_reason() -> None:
    """As on a one-GPU machine with nccl: every example a skip ("needs 2 GPUs for nccl")."""
    reason = "needs 2 GPUs for nccl, 1 visible"

    def skipped(cell):  # type: ignore[no-untyped-def]
        from conformance.outcome import CellResult

        return CellResult(cell.id, cell.axes(), Outcome.SKIP, reason, 0.0)

    result = run_property(Property(BASE), skipped, "nccl", settings=FEW)
    assert result.outcome is Outcome.SKIP, result.detail
    assert reason in result.detail and "none of the" in result.detail

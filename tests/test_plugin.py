"""The plugin end to end, as a user runs it: pytest on cases/, then results.json and matrix.md."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.case import Case
from conformance.check.registry import CHECKS
from conformance.outcome import CellResult, Outcome
from conformance.runner import run_case
from conformance.strategy.registry import RegisteredStrategy
from conformance.world import WorldPool
from tests.procs import alive

ROOT = Path(__file__).resolve().parent.parent
PYTEST_CASES = [sys.executable, "-m", "pytest", "cases", "-q", "-p", "no:cacheprovider"]


def run_cases(tmp_path: Path, *args: str, name: str = "run") -> tuple[int, dict[str, Any], str]:
    out = tmp_path / name
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "cases",
            "-q",
            "-p",
            "no:cacheprovider",
            "--report-dir",
            str(out),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return proc.returncode, results, proc.stdout + proc.stderr


def outcomes(results: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["outcome"] for c in results["cells"]}


SHARDED_ROUNDTRIP = "test_roundtrip and sharded"  # the round trip's cells: the other checks are slower


def collected_ids(*args: str) -> set[str]:
    """The cell ids `pytest cases --collect-only` selects with these arguments (no cell runs)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "cases", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return {
        line.split("[", 1)[1].rstrip("]") for line in proc.stdout.splitlines() if "::" in line and "[" in line
    }


def test_k_sharded_runs_only_sharded_cells_and_xdist_agrees(tmp_path: Path) -> None:
    """-k sharded selects every sharded round-trip cell of the run (ci-product: a covering run
    with -k enumerates no unsupported cell, and this one counts them): the built-in matrix's and
    those of the installed entry-point strategies (the adapters, when their frameworks are
    installed), collected here; the built-in DCP ones run serially and under xdist, with the same
    outcome for each (the adapters' cells run in their own tests and in the gated ci slice:
    running them here too cost most of this test's 6 minutes)."""
    from conformance.matrix import run_cells
    from conformance.matrix.cells import why_unsupported
    from conformance.strategy.registry import build_registry

    every = {c.id for c in run_cells(build_registry([]), "ci-product", "roundtrip") if c.kind == "sharded"}
    assert collected_ids("--matrix", "ci-product", "-k", SHARDED_ROUNDTRIP) == every
    # run: the DCP cells, every layout of the slice among them (37 of the 122 that run: the
    # whole slice twice cost 150 s of the suite's own tests)
    run_k = f"{SHARDED_ROUNDTRIP} and -dcp-"
    builtin = ("--matrix", "ci-product", "-k", run_k, "--strategy", "builtin")
    code0, serial, log0 = run_cases(tmp_path, *builtin, "-n", "0", name="serial")
    code2, parallel, log2 = run_cases(tmp_path, *builtin, "-n", "2", name="xdist")
    registry = build_registry(["builtin"])
    sharded = [
        c for c in run_cells(registry, "ci-product", "roundtrip") if c.kind == "sharded" and "-dcp-" in c.id
    ]
    assert {c.wrapper_token for c in sharded} >= {"ddp", "fsdp1_full_shard", "fsdp2", "fsdp2_tp", "pp", "tp"}
    expected_ids = {c.id for c in sharded if not why_unsupported(registry, c)}  # the rest: rules
    assert expected_ids <= every  # equal where no adapter is installed
    assert set(outcomes(serial)) == expected_ids, log0
    rules = serial["environment"]["unsupported"]["rules"]
    assert sum(r["cells"] for r in rules) == len(sharded) - len(expected_ids) > 0, rules
    assert outcomes(parallel) == outcomes(serial), log2
    assert "pass" in outcomes(serial).values()
    assert code0 == code2, log0 + log2  # 1 where torch has a sharded finding; the same either way
    assert code0 in (0, 1), log0
    env = serial["environment"]
    assert serial["schema"] == 1
    assert env["backend"] == "gloo" and env["world_sizes"] == [2] and env["torch"]
    # what the run cost, and on how many workers
    assert env["run"]["workers"] == 0 and parallel["environment"]["run"]["workers"] == 2
    assert env["run"]["wall_s"] > 0
    assert "min of wall time on 2 pytest-xdist workers" in (tmp_path / "xdist" / "matrix.md").read_text()
    for cell in serial["cells"]:
        fields = {"id", "axes", "outcome", "detail", "duration_s", "rerun"}
        # a failing cell's differences and errors, one record each
        assert set(cell) == fields | (
            {"observed"} if cell["outcome"] in ("fail", "error", "crash", "hang") else set()
        )
        assert cell["axes"]["kind"] == "sharded" and cell["detail"]
    matrix = (tmp_path / "serial" / "matrix.md").read_text()
    assert "| fsdp2 " in matrix and "unsupported" in matrix


def test_known_failures_gate_and_later_cells_still_run(tmp_path: Path) -> None:
    offload = "fsdp1_full_shard-sd_full_offload_rank0-torch_save-adamw-mlp-w2"
    later = "fsdp2-dsd_sharded-dcp-adamw-mlp-w2"  # sorts after the offload cell
    selection = ["--matrix", "default-product", "-k", f"test_roundtrip and ({offload} or {later})"]
    code, results, log = run_cases(tmp_path, *selection, name="plain")
    got = outcomes(results)
    assert got[later] == "pass", log
    assert got[offload] in ("crash", "error"), log  # a result, never the end of the run
    assert code == 1
    baseline = tmp_path / "known.toml"
    baseline.write_text(f'["{offload}"]\noutcome = "{got[offload]}"\nreason = "torch 2.13 CPU"\n')
    code, _, log = run_cases(tmp_path, *selection, "--baseline", str(baseline), name="gated")
    assert code == 0, log
    assert "1 xfailed" in log


def test_wrong_baseline_fails_the_run(tmp_path: Path) -> None:
    baseline = tmp_path / "wrong.toml"
    baseline.write_text('["ddp-sd_full-torch_save-adamw-mlp-w2"]\noutcome = "crash"\nreason = "made up"\n')
    code, _, log = run_cases(
        tmp_path,
        "--matrix",
        "ci",
        "-k",
        "test_roundtrip and ddp-sd_full-torch_save-",
        "--baseline",
        str(baseline),
    )
    assert code == 0 and "stale baseline entry" in log  # stale: reported, not a failure
    baseline.write_text('["x"]\noutcome = "nope"\n')
    code, _, log = run_cases(
        tmp_path,
        "--matrix",
        "ci",
        "-k",
        "test_roundtrip and ddp-sd_full-torch_save-",
        "--baseline",
        str(baseline),
    )
    assert code == 4 and "is not one of" in log  # a usage error, clearly worded


@pytest.mark.parametrize("option", ["--matrix=bogus", "--case-timeout=0"])
def test_bad_options_are_usage_errors(tmp_path: Path, option: str) -> None:
    code, _, log = run_cases(tmp_path, option, "--collect-only")
    assert code in (2, 4), log


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def rank_pids_of(ancestor: int) -> list[int]:
    """Rank processes descending from `ancestor` (children of pytest, or of its xdist workers)."""
    out = subprocess.run(["pgrep", "-f", "conformance._rank_entry"], capture_output=True, text=True)
    ranks = []
    for pid in (int(p) for p in out.stdout.split()):
        walk = pid
        while walk > 1 and walk != ancestor:
            walk = _parent(walk)
        if walk == ancestor:
            ranks.append(pid)
    return ranks


@pytest.mark.parametrize(
    ("signal_name", "workers"),
    [(s, w) for s in ("SIGINT", "SIGKILL") for w in ("-n0", "-n2")] + [("SIGKILL", "--fresh-worlds")],
)
def test_interrupted_run_leaves_no_rank_behind(tmp_path: Path, signal_name: str, workers: str) -> None:
    import os
    import signal
    import time

    proc = subprocess.Popen(
        [*PYTEST_CASES, "--matrix", "ci", workers, "--report-dir", str(tmp_path / "run")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    ranks: list[int] = []
    deadline = time.monotonic() + 120
    while not ranks and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        ranks = rank_pids_of(proc.pid)
    assert ranks, "no world started"
    time.sleep(1)
    ranks = rank_pids_of(proc.pid)
    os.kill(proc.pid, getattr(signal, signal_name))
    proc.wait(60)
    time.sleep(3)
    left = [pid for pid in ranks if alive(pid)]
    assert left == [], f"rank processes left after {signal_name} ({workers}): {left}"


def test_every_cell_is_marked_with_registered_markers(tmp_path: Path) -> None:
    # default: a covering, every value of every axis (each marker's source) in some cell of it, at
    # a third of full's collection time
    code, _, log = run_cases(
        tmp_path,
        "--matrix",
        "default",
        "--collect-only",
        "-W",
        "error::pytest.PytestUnknownMarkWarning",
        "-m",
        "fsdp1 and local",
    )
    assert code == 0, log
    assert "fsdp1_full_shard+orig-sd_local-torch_save_per_rank" in log or "sd_local" in log


def test_flipping_one_baseline_outcome_fails_the_gate_and_names_the_cell(tmp_path: Path) -> None:
    selection = ["--matrix", "ci", "-k", "test_roundtrip and (ddp-sd_full-torch_save- or ddp-dsd_full-dcp-)"]
    baseline = tmp_path / "ci.toml"
    code, results, log = run_cases(
        tmp_path, *selection, "--baseline", str(baseline), "--update-baseline", name="w"
    )
    assert baseline.exists(), log
    written = baseline.read_text()
    assert 'profile = "ci"' in written and "passes = [" in written
    code, _, log = run_cases(tmp_path, *selection, "--baseline", str(baseline), name="same")
    assert code == 0, log
    passing = next(i for i, o in outcomes(results).items() if o == "pass")
    failing = next(i for i, o in outcomes(results).items() if o == "fail")
    # an expected pass flipped to "fail": the cell now passes, which is only stale (a warning);
    # an expected fail flipped to "crash": the fail is a failure of another kind, a regression
    baseline.write_text(
        written.replace(f'["{failing}"]\noutcome = "fail"', f'["{failing}"]\noutcome = "crash"')
    )
    code, _, log = run_cases(tmp_path, *selection, "--baseline", str(baseline), name="flipped")
    assert code == 1 and failing in log and "regression: expected crash, got fail" in log, log
    # the expected pass removed from passes: no entry, still passes: fine; then declared a failure
    baseline.write_text(written)
    code, _, log = run_cases(tmp_path, *selection, "--baseline", str(baseline), name="restored")
    assert code == 0, log
    assert passing in written


def test_a_cell_gone_from_the_matrix_fails_the_gate(tmp_path: Path) -> None:
    """A cell of the baseline's own profile that the matrix lost fails the gate; an entry of
    another profile that matches no cell is a warning."""
    baseline = tmp_path / "gone.toml"
    selection = ("--matrix", "ci", "-k", "test_roundtrip and ddp-sd_full-torch_save-adamw-mlp-w2")
    for profile, expected_code, message in (
        ("ci", 1, "gone from the ci matrix: ddp-sd_full-torch_save-adamw-mlp-w3"),
        ("default", 0, "match no cell of the ci matrix"),
    ):
        baseline.write_text(f'profile = "{profile}"\npasses = ["ddp-sd_full-torch_save-adamw-mlp-w3"]\n')
        code, _, log = run_cases(tmp_path, *selection, "--baseline", str(baseline))
        assert code == expected_code and message in log, log


REGISTERED = "test_roundtrip and w2 and not groups and not sched"  # a few cells of each strategy


def test_registered_strategies_run_their_declared_cells_and_are_caught(tmp_path: Path) -> None:
    """--strategy module:ATTR, repeatable: only the strategies named run. The control passes;
    a strategy that falls back to replication fails its sanity check, one that drops the
    optimizer fails the comparison; undeclared cells are unsupported with the reason, and a
    missing framework makes skips that name it."""
    names = ["CONTROL", "FALLS_BACK_TO_REPLICATION", "DROPS_OPTIMIZER", "NEEDS_MISSING_FRAMEWORK"]
    strategies = [arg for name in names for arg in ("--strategy", f"tests.broken:{name}")]
    # ci-product: a covering run enumerates no unsupported cell, and this one must show them as rules
    code, results, log = run_cases(tmp_path, "--matrix", "ci-product", "-k", REGISTERED, *strategies)
    assert code == 1, log
    cells = {c["id"]: c for c in results["cells"]}
    assert all(
        c["axes"]["strategy"] in ("control", "replicates", "forgets", "absent") for c in cells.values()
    )
    cell = "{}-fsdp1_full_shard+orig-sharded-dcp-adamw-mlp-w2"
    assert cells[cell.format("control")]["outcome"] == "pass"
    assert cells[cell.format("replicates")]["outcome"] == "fail"
    assert "silently replicated" in cells[cell.format("replicates")]["detail"]
    assert cells[cell.format("forgets")]["outcome"] == "fail"
    assert cells[cell.format("absent")]["outcome"] == "skip"
    assert "no-such-framework-xyz" in cells[cell.format("absent")]["detail"]
    # undeclared cells never run: rules with their reasons, not rows
    assert "control-fsdp2-sharded-dcp-adamw-mlp-w2" not in cells
    assert "control-fsdp1_full_shard+orig-full-dcp-adamw-mlp-w2" not in cells
    reasons = {r["reason"] for r in results["environment"]["unsupported"]["rules"]}
    assert "control does not declare fsdp2 shard" in reasons
    assert any("full state dicts" in r for r in reasons), reasons
    assert results["environment"]["strategies"]["absent"] == {"no-such-framework-xyz": None}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "give package.module:ATTR"),
        ("tests.no_such_module:X", "cannot import tests.no_such_module"),
        ("tests.broken:NO_SUCH", "has no attribute 'NO_SUCH'"),
        ("tests.broken:NOT_A_STRATEGY", "is a object, not a RegisteredStrategy"),
    ],
)
def test_bad_strategies_are_usage_errors(tmp_path: Path, spec: str, message: str) -> None:
    code, _, log = run_cases(tmp_path, "--strategy", spec, "--collect-only")
    assert code == 4 and message in log, log


def test_the_documented_example_copied_into_a_new_file_runs_as_written(tmp_path: Path) -> None:
    """The example of docs/your-strategy.md in a new file, then its command."""
    doc = (ROOT / "docs" / "your-strategy.md").read_text()
    example = doc.split("```python\n# my_strategy.py\n", 1)[1].split("```", 1)[0]
    assert example == (ROOT / "examples" / "my_strategy.py").read_text().split('"""\n\n', 1)[1]
    (tmp_path / "my_strategy.py").write_text(example)
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            *PYTEST_CASES[:3],
            str(ROOT / "cases"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--strategy",
            "my_strategy:STRATEGY",
            "--matrix",
            "ci",
            "-k",
            "test_roundtrip",
            "--report-dir",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((out / "results.json").read_text())
    passed = [c["id"] for c in results["cells"] if c["outcome"] == "pass"]
    assert "my_fsdp2_dcp-fsdp2-sharded-dcp-adamw-mlp-w2" in passed
    assert (out / "matrix.html").exists()


def python_blocks(doc: str) -> list[str]:
    """The text of every ```python block of a markdown document."""
    return re.findall(r"```python\n(.*?)```", doc, flags=re.DOTALL)


def round_trips(strategy: RegisteredStrategy, pick: Callable[[Case], bool]) -> list[CellResult]:
    """The strategy's declared round-trip cells of the ci profile that `pick` takes, run in warm
    worlds of this process (whose import path the ranks get)."""
    cells = [
        c
        for c in CHECKS["roundtrip"].strategy_cells("ci", strategy)
        if not strategy.unsupported_reason(c) and pick(c)
    ]
    with WorldPool() as pool:
        return [run_case(pool, c, backend="gloo", timeout_s=120, registered=strategy) for c in cells]


def test_the_own_optimizer_example_is_the_documented_one_and_its_round_trips_pass() -> None:
    """docs/your-strategy.md shows examples/own_optimizer.py whole; its round trips (a container
    of one optimizer per param group, the framework's scheduler) pass: the cells of
    `pytest cases --strategy examples.own_optimizer:STRATEGY --matrix ci -k "roundtrip and mlp and w2"`."""
    from examples.own_optimizer import STRATEGY

    doc = (ROOT / "docs" / "your-strategy.md").read_text()
    assert (ROOT / "examples" / "own_optimizer.py").read_text() in python_blocks(doc)
    results = round_trips(STRATEGY, lambda c: c.model == "mlp" and c.world_size == 2)
    assert {r.axes["optimizer"] for r in results} == {"adam", "adamw", "adamw+groups", "adamw+sched", "sgd"}
    for result in results:
        assert result.outcome is Outcome.PASS, f"{result.id}:\n{result.detail}"


def test_the_documented_tp_snippet_passes_on_both_2_rank_meshes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TP block of docs/your-strategy.md as my_tp.py: its ci cells, TP alone and FSDP2 + TP
    on the (1, 2) and (2, 1) meshes, pass (the sanity check finds the TP weights on "tp")."""
    doc = (ROOT / "docs" / "your-strategy.md").read_text()
    (tmp_path / "my_tp.py").write_text(next(b for b in python_blocks(doc) if b.startswith("# my_tp.py\n")))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        results = round_trips(importlib.import_module("my_tp").STRATEGY, lambda c: True)
    finally:
        sys.modules.pop("my_tp", None)
    assert sorted(r.id.rsplit("-", 1)[-1] for r in results) == ["mesh1x2", "mesh2x1", "w2"]
    for result in results:
        assert result.outcome is Outcome.PASS, f"{result.id}:\n{result.detail}"


# Cells whose outcome once depended on the cells before them in a warm world (torch 2.11: a
# DTensor unpickled from per-rank files resolved its process group by a name that only a fresh
# world gave it), over every check the ci profile has for them.
WARM_SENSITIVE = "fsdp2 and dsd_sharded and torch_save_per_rank and not property"


def test_fresh_worlds_give_the_outcomes_of_warm_worlds(tmp_path: Path) -> None:
    code_warm, warm, log_warm = run_cases(tmp_path, "--matrix", "ci", "-k", WARM_SENSITIVE, name="warm")
    code_fresh, fresh, log_fresh = run_cases(
        tmp_path, "--matrix", "ci", "-k", WARM_SENSITIVE, "--fresh-worlds", name="fresh"
    )
    assert outcomes(fresh) == outcomes(warm), log_fresh
    checks = {c["axes"]["check"] for c in warm["cells"]}
    assert {"roundtrip", "resume", "corrupt"} <= checks, checks  # multi-phase checks included
    assert "harness-error" not in outcomes(warm).values(), log_warm
    assert code_warm == code_fresh, log_warm + log_fresh
    assert "--fresh-worlds" in fresh["environment"]["pytest_args"]


def test_a_run_in_which_no_cell_ran_says_so_and_fails(tmp_path: Path) -> None:
    """The FSDP tutorial's rank-0 load needs a GPU: on gloo every cell of it is a skip or
    unsupported. Nothing tested is not a pass."""
    code, results, log = run_cases(tmp_path, "--matrix", "default", "-k", "rank0_init and test_roundtrip")
    assert set(outcomes(results).values()) <= {"skip", "unsupported"}, log
    assert code == 1, log
    assert "GATE: no cell ran" in log

"""The per-version publication: the command that publishes a table into its own directory, and
the history across the published tables."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.outcome import CellResult, Outcome
from conformance.report.history import Published, changed_cells, feature_history, phrase, series_of
from conformance.versions.publish import Interpreter, report_dir
from conformance.versions.venv import READY, SUITE, TorchVenv, ensure, installed, registered_strategies

ROOT = Path(__file__).resolve().parent.parent
CELL = "roundtrip and ddp-sd_full-torch_save-adamw-mlp-w2"


def test_phrases_say_since_until_and_only() -> None:
    v = ["2.10", "2.11", "2.12", "2.13"]
    assert phrase(v, ["yes"] * 4) == "yes in every version"
    assert phrase(v, ["no", "no", "yes", "yes"]) == "yes since 2.12 (no before)"
    assert phrase(v, ["yes", "yes", "no", "no"]) == "yes until 2.11 (no since 2.12)"
    assert phrase(v, ["yes", "yes", "no", "yes"]) == "no in 2.12 only (yes in the others)"
    assert phrase(v, ["yes", "no", "skip", "yes"]) == "2.10: yes, 2.11: no, 2.12: skip, 2.13: yes"


def _table(tmp: Path, version: str, outcome: Outcome, detail: str = "ok") -> Published:
    axes = {"wrapper": "ddp", "sharding": "replicate", "api": "sd_full", "storage": "torch_save"}
    axes |= {"optimizer": "adamw", "model": "mlp", "world_size": 2, "precision": "fp32", "check": "roundtrip"}
    cell = CellResult("ddp-sd_full-torch_save-adamw-mlp-w2", axes, outcome, detail, 0.1)
    path = tmp / f"torch-{version}-cpu-gloo" / "results.json"
    return Published(path, {"torch": f"{version}+cpu", "matrix": "default"}, [cell])


def test_a_cell_that_breaks_in_a_version_shows_in_the_history(tmp_path: Path) -> None:
    tables = [
        _table(tmp_path, "2.12.1", Outcome.PASS),
        _table(tmp_path, "2.13.0", Outcome.FAIL, "param/fc1.weight: values differ\nmore"),
        _table(tmp_path, "2.9.1", Outcome.PASS),
    ]
    (series,) = series_of(tables).values()
    assert [t.version for t in series] == ["2.9.1", "2.12.1", "2.13.0"]  # by version, not by name
    (headers, body), _ = feature_history(series)
    assert headers[-3:] == ["2.9.1", "2.12.1", "2.13.0"]
    assert body and all(row[2] == "yes until 2.12.1 (no since 2.13.0)" for row in body), body
    _, changed = changed_cells(series[1], series[2])
    assert changed == [
        ["ddp-sd_full-torch_save-adamw-mlp-w2", "pass", "fail", "param/fc1.weight: values differ"]
    ]
    # HISTORY.md is the summary (cells moved by outcome); index.html has every cell
    from conformance.report.history import histories
    from conformance.report.history_page import render_history_markdown, render_index_html

    history = histories(series, [])
    page = render_history_markdown(history)
    assert "### 2.12.1 -> 2.13.0: 1 cells changed" in page
    assert "| pass   | fail |       1 |" in page, page
    assert "ddp-sd_full-torch_save-adamw-mlp-w2" not in page
    assert "ddp-sd_full-torch_save-adamw-mlp-w2" in render_index_html(
        series, history, tmp_path / "index.html"
    )


def test_report_dirs_name_version_hardware_backend_and_profile(tmp_path: Path) -> None:
    cpu = Interpreter(Path("python"), "2.11.0+cu130", 0)
    assert report_dir(tmp_path, cpu, "auto", "default") == tmp_path / "torch-2.11.0-cpu-gloo"
    assert report_dir(tmp_path, cpu, "gloo", "ci") == tmp_path / "torch-2.11.0-cpu-gloo-ci"
    gpu = Interpreter(Path("python"), "2.11.0+cu130", 1)
    assert report_dir(tmp_path, gpu, "auto", "default") == tmp_path / "torch-2.11.0-cuda-auto"
    assert report_dir(tmp_path, gpu, "nccl", "default") == tmp_path / "torch-2.11.0-cuda-nccl"


def _view_of_this_venv(venv: TorchVenv) -> None:
    """`venv` made a view of the venv running the tests: its python, config and packages."""
    (venv.path / "bin").mkdir(parents=True)
    venv.python.symlink_to(sys.executable)
    (venv.path / "pyvenv.cfg").write_text((Path(sys.prefix) / "pyvenv.cfg").read_text())
    (venv.path / "lib").symlink_to(Path(sys.prefix) / "lib")


def test_a_made_venv_is_reused_without_pip(tmp_path: Path) -> None:
    venv = TorchVenv("2.13.0", tmp_path)
    _view_of_this_venv(venv)
    held = {"torch": "2.13.0+cpu", "fsdp-checkpoint-conformance": "0.1.0"}
    (venv.path / READY).write_text(json.dumps(held))
    said: list[str] = []
    assert ensure(venv, ROOT, say=said.append) == held
    assert said == [f"venv {venv.path}: cached (torch 2.13.0+cpu)"]


def test_what_a_venv_holds_is_asked_of_the_venv_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout's egg-info on the path (the working directory, PYTHONPATH) once made a venv
    without the suite look complete, and its tables came out without the adapters' rows."""
    bare = TorchVenv("2.13.0", tmp_path / "venvs")
    (bare.path / "bin").mkdir(parents=True)
    bare.python.symlink_to(
        Path(sys.base_prefix) / "bin" / Path(sys.executable).name
    )  # no site-packages of ours
    checkout = tmp_path / "checkout"
    info = checkout / "fsdp_checkpoint_conformance.egg-info"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {SUITE}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[conformance.strategies]\nx = conformance.adapters.lightning:FABRIC_FSDP\n"
    )
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    assert SUITE not in installed(bare)
    assert registered_strategies(bare) == []
    view = TorchVenv("2.13.0", tmp_path / "view")
    _view_of_this_venv(view)
    assert SUITE in installed(view) and "lightning_fsdp" in registered_strategies(view)


def _publish(reports: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "conformance", "publish", "--matrix", "ci", "--reports", str(reports)]
    cmd += ["-n", "0", "--", "-k", CELL]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_publish_writes_the_table_of_this_python_and_compares_with_the_one_before(tmp_path: Path) -> None:
    import torch

    first = _publish(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    out = tmp_path / f"torch-{torch.__version__.split('+')[0]}-cpu-gloo-ci"
    assert not (out / "results.json").exists()  # a published table keeps its results gzipped
    published = json.loads(gzip.decompress((out / "results.json.gz").read_bytes()))
    cells = published["cells"]
    assert [(c["id"], c["outcome"]) for c in cells] == [("ddp-sd_full-torch_save-adamw-mlp-w2", "pass")]
    assert (out / "matrix.md").exists() and (out / "matrix.html").exists()
    # the table's empty entries answered from the full declaration (report.applicable): the row's
    # lifecycle is n/a (no check declares it for a built-in row), its 4-rank round trip a debt
    answered = published["environment"]["not_applicable"]
    row = "ddp-sd_full-torch_save"
    assert [row, "keep latest"] in [a[:2] for a in answered["answers"]], answered
    assert [row, "4 ranks"] in answered["unknown"], answered
    assert "n/a" in (out / "matrix.md").read_text()
    assert "[publish] published" in first.stdout
    second = _publish(tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "against the table there before: 0 added, 0 removed, 0 improved, 0 regressed" in second.stdout
    history = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance",
            "history",
            str(out / "results.json"),  # the name it replaced still reads it
            "-o",
            str(tmp_path / "HISTORY.md"),
            "--index",
            str(tmp_path / "index.html"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert history.returncode == 0, history.stderr
    page = (tmp_path / "index.html").read_text()
    assert 'href="torch-' in page and "matrix.html" in page


def test_a_finding_records_the_published_versions_it_was_seen_in(tmp_path: Path) -> None:
    from conformance.findings import Finding
    from conformance.report.history import update_finding_versions

    finding = Finding("f", "t", "bug", "s", ("ddp-*",), torch=("2.4.0", "2.12.1"))
    text = 'id = "f"\ntorch = ["2.4.0", "2.12.1"]\n'
    tables = [
        _table(tmp_path, "2.12.1", Outcome.PASS),  # published, not seen: dropped
        _table(tmp_path, "2.13.0", Outcome.FAIL),  # seen
    ]
    assert update_finding_versions(text, tables, [finding]) == 'id = "f"\ntorch = ["2.4.0", "2.13.0"]\n'


def test_a_finding_whose_cells_no_table_has_keeps_its_versions(tmp_path: Path) -> None:
    from conformance.findings import Finding
    from conformance.report.history import update_finding_versions

    finding = Finding("g", "t", "bug", "s", ("crossversion-*",), torch=("2.14.1", "2.15.0"))
    text = 'id = "g"\ntorch = ["2.14.1", "2.15.0"]\n'
    assert update_finding_versions(text, [_table(tmp_path, "2.15.0", Outcome.FAIL)], [finding]) == text


def test_a_venv_gets_the_checkpoint_libraries_its_torch_takes_and_every_new_adapter() -> None:
    """torch_checkpointing needs torch >= 2.11: an older venv goes without it (its rows skip,
    naming it); a cached venv whose entry points predate an adapter of the checkout is completed."""
    from conformance.versions.libraries import built_libraries, libraries_for
    from conformance.versions.venv import checkout_strategies

    assert libraries_for("2.13.0") == [
        "torch_checkpointing==0.1.1",
        "transformers==5.24.0",
        "peft==0.21.2",
        "ai2-olmo-core==3.0.0",
        "tyro>=0.9",
        "ray==2.60.0",
        "omegaconf>=2.3",
        "datasets>=4.0",
        "pillow",
        "codetiming",
        "cloudpickle",
        "orjson",
        "importlib_metadata",
        "megatron-core==0.16.1",
        "megatron-fsdp==0.6.1",
    ]
    assert libraries_for("2.13.0", no_deps=True) == [
        "torchtitan==0.3.0",
        "spmd_types==0.2.3",
        "verl==0.9.1",
        "tensordict==0.10.0",
        "pyvers==0.1.0",
        "nemo-automodel==0.7.0",
    ]
    assert libraries_for("2.12.1") == [
        "torch_checkpointing==0.1.1",
        "transformers==5.24.0",
        "peft==0.21.2",
        "ai2-olmo-core==3.0.0",
        "ray==2.60.0",
        "omegaconf>=2.3",
        "datasets>=4.0",
        "pillow",
        "codetiming",
        "cloudpickle",
        "orjson",
        "importlib_metadata",
    ]
    assert libraries_for("2.10.0") == ["transformers==5.24.0", "peft==0.21.2", "ai2-olmo-core==3.0.0"]
    assert libraries_for("2.10.0", no_deps=True) == []
    # OLMo-core caps torch below 2.14: a newer venv goes without it, as an older one goes without
    # what needs a newer torch
    assert "ai2-olmo-core==3.0.0" not in libraries_for("2.14.1")
    assert libraries_for("2.9.1") == ["transformers==5.24.0", "peft==0.21.2"]
    # DeepSpeed is built against the venv's torch, its CPU backend's op prebuilt
    assert [(lib.requirement, dict(lib.build_env)) for lib in built_libraries("2.15.0")] == [
        ("deepspeed==0.19.8", {"DS_BUILD_SHM_COMM": "1"})
    ]
    assert built_libraries("2.12.1") == []
    assert {"torch_checkpointing", "lightning_fsdp"} <= set(checkout_strategies(ROOT))


def test_each_library_is_pinned_in_one_place() -> None:
    """conformance/versions/libraries.py holds every checkpoint library's pin; the README, .ci/run
    and pyproject.toml install through `python -m conformance libraries --install` and name none."""
    from conformance.versions.libraries import LIBRARY_PACKAGES, install_commands

    commands = install_commands("2.13.0", "py")
    assert [argv[4:] for argv, _ in commands] == [
        [
            "torch_checkpointing==0.1.1",
            "transformers==5.24.0",
            "peft==0.21.2",
            "ai2-olmo-core==3.0.0",
            "tyro>=0.9",
            "ray==2.60.0",
            "omegaconf>=2.3",
            "datasets>=4.0",
            "pillow",
            "codetiming",
            "cloudpickle",
            "orjson",
            "importlib_metadata",
            "megatron-core==0.16.1",
            "megatron-fsdp==0.6.1",
        ],
        [
            "--no-deps",
            "torchtitan==0.3.0",
            "spmd_types==0.2.3",
            "verl==0.9.1",
            "tensordict==0.10.0",
            "pyvers==0.1.0",
            "nemo-automodel==0.7.0",
        ],
        ["--no-cache-dir", "--no-build-isolation", "deepspeed==0.19.8"],
    ]
    assert commands[-1][1] == {"DS_BUILD_SHM_COMM": "1"}
    assert [argv[4:] for argv, _ in install_commands("2.10.0", "py")] == [
        ["transformers==5.24.0", "peft==0.21.2", "ai2-olmo-core==3.0.0"]
    ]
    for path in ("README.md", ".ci/run", "pyproject.toml"):
        text = (ROOT / path).read_text()
        assert "conformance libraries --install" in text or path == "pyproject.toml", path
        for lib in LIBRARY_PACKAGES.values():
            assert lib.requirement not in text, (path, lib.requirement)

"""Bad output settings fail before the first cell, in one line, with pytest's usage error (4)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.procs import pytest_cases

ROOT = Path(__file__).resolve().parent.parent
ONE_CELL = "test_roundtrip and ddp-dsd_full-dcp-adamw-mlp-w2"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pytest_cases("--matrix", "ci", "-k", ONE_CELL, *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _bad_settings(tmp_path: Path) -> list[tuple[list[str], str]]:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    broken = tmp_path / "broken.toml"
    broken.write_text("passes = [\n")
    return [
        (["--report-dir", str(a_file)], f"--report-dir {a_file} is a file, not a folder"),
        (["--report-dir", str(a_file / "sub")], f"{a_file} is a file, not a folder"),
        (["--report-dir", str(locked / "out")], f"{locked} is not writable"),
        (
            ["--baseline", str(broken), "--update-baseline", "--report-dir", str(tmp_path / "r")],
            "cannot be read to be rewritten",
        ),
        (
            ["--baseline", str(locked / "b.toml"), "--update-baseline", "--report-dir", str(tmp_path / "r")],
            "is not writable",
        ),
    ]


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid"), reason="POSIX permissions")
def test_each_bad_output_setting_exits_4_before_a_cell_runs(tmp_path: Path) -> None:
    import os

    for args, needle in _bad_settings(tmp_path):
        if "not writable" in needle and os.geteuid() == 0:
            continue  # root writes anywhere: the permission cases need another user
        proc = _run(*args)
        assert proc.returncode == 4, f"{args}: {proc.returncode}\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}"
        errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
        assert len(errors) == 1 and needle in errors[0], f"{args}:\n{proc.stderr[-1500:]}"
        assert "passed" not in proc.stdout and "failed" not in proc.stdout, proc.stdout[-500:]


def test_a_folder_the_run_cannot_write_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user without write permission sees it (this suite's hosts run as root, which may
    write anywhere: os.access answers for that user here)."""
    import os

    from conformance.plugin import output

    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(output.os, "access", lambda path, mode: Path(path) != locked)
    with pytest.raises(pytest.UsageError, match=f"{locked} is not writable"):
        output.check_output(locked / "out", None, False)
    baseline = locked / "b.toml"
    baseline.write_text('profile = "ci"\npasses = []\n')
    monkeypatch.setattr(output.os, "access", lambda path, mode: Path(path) != baseline)
    with pytest.raises(pytest.UsageError, match="is not writable"):
        output.check_output(tmp_path / "r", str(baseline), True)
    assert os.access(tmp_path, os.W_OK)

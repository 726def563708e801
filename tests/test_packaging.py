"""The wheel carries the findings data: reports/findings.toml is package data of conformance.data
(pyproject.toml), so an installed package, outside any checkout, loads the findings and a baseline
that names them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conformance.findings import FINDINGS_PATH, load_findings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
# what the build reads: the checkout is copied so that the build writes nothing into it
SOURCES = ("pyproject.toml", "README.md", "MANIFEST.in", "conformance", "reports/findings.toml")
BUILD_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("setuptools", reason="building the wheel without isolation needs setuptools")
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, target)
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out)]
    proc = subprocess.run(
        [*pip, str(source)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return next(out.glob("*.whl"))


def test_the_wheel_ships_the_findings_data(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("conformance/data/findings.toml")
    assert shipped == FINDINGS_PATH.read_bytes()
    assert [f["id"] for f in tomllib.loads(shipped.decode())["finding"]] == [f.id for f in load_findings()]


LOAD_OUTSIDE = """
import json
import conformance
from conformance.baseline import load_baseline
from conformance.findings import findings_path, load_findings

baseline = load_baseline("ci.toml")
print(json.dumps({
    "package": conformance.__file__,
    "findings_path": str(findings_path()),
    "findings": [f.id for f in load_findings()],
    "named": sorted({i for e in baseline.entries.values() for i in e.findings or ()}),
}))
"""


def test_the_installed_package_loads_a_baseline_that_names_findings(wheel: Path, tmp_path: Path) -> None:
    """Installed from the wheel (pip --target), run from a directory outside the checkout: the
    findings come from the package's own data, and the committed ci baseline loads."""
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    elsewhere.mkdir()
    shutil.copy2(ROOT / "reports" / "baseline" / "ci.toml", elsewhere / "ci.toml")
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_OUTSIDE],
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    assert Path(got["package"]).is_relative_to(site), got["package"]
    assert got["findings_path"] == str(site / "conformance" / "data" / "findings.toml")
    assert got["findings"] == [f.id for f in load_findings()]
    assert got["named"] and set(got["named"]) <= set(got["findings"])

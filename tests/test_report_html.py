"""The HTML page: self-contained, and checked in a real headless browser (Debian's chromium,
which .ci/run installs; there CONFORMANCE_REQUIRE_BROWSER=1 makes a missing browser a failure,
never a skip)."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conformance.outcome import CellResult, Outcome
from conformance.report.html import render_html
from tests.test_report import AXES as REPORT_AXES
from tests.test_report import ENV

ROOT = Path(__file__).resolve().parents[1]
AXES = {**REPORT_AXES, "family": "fsdp2", "check": "roundtrip"}
ERROR = "rank 0 raised RuntimeError first:\nTraceback (most recent call last):\nRuntimeError: setStorage: out of bounds"
CELLS = [
    CellResult(
        "fsdp2-dsd_full-dcp-adamw-mlp-w1", {**AXES, "world_size": 1}, Outcome.PASS, "bitwise equal", 0.1
    ),
    CellResult("fsdp2-dsd_full-dcp-adamw-mlp-w2", {**AXES, "world_size": 2}, Outcome.ERROR, ERROR, 0.1),
    CellResult(
        "fsdp2-dsd_full-torch_save-adamw-mlp-w2",
        {**AXES, "storage": "torch_save", "world_size": 2},
        Outcome.UNSUPPORTED,
        "by design",
        0.0,
    ),
]


def test_page_is_self_contained_with_error_line_and_repro() -> None:
    page = html.unescape(render_html(ENV, CELLS))
    assert "http://" not in page and "https://" not in page  # nothing to fetch
    assert "rank 0: RuntimeError: setStorage: out of bounds" in page
    assert "torchrun --nproc-per-node 2 -m conformance.repro fsdp2-dsd_full-dcp-adamw-mlp-w2" in page
    assert "never counted as a pass" in page  # the legend
    assert "roundtrip: [1/2] passed of those run" in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _dump_dom(browser: str, page: Path, query: str) -> str:
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{page}{query}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _visible_rows(dom: str) -> list[str]:
    rows = re.findall(r"<tr class=\"o-[^\"]*\"[^>]*>.*?</tr>", dom, flags=re.S)
    return [row for row in rows if "display: none" not in row.split(">", 1)[0]]


def test_page_in_a_headless_browser_renders_and_filters(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CONFORMANCE_REQUIRE_BROWSER"):
            pytest.fail("CONFORMANCE_REQUIRE_BROWSER is set and no chromium is installed")
        pytest.skip("no chromium on this machine (.ci/run installs Debian's)")
    page = tmp_path / "matrix.html"
    page.write_text(render_html(ENV, CELLS))
    dom = _dump_dom(browser, page, "")
    assert "3 of 3 cells shown" in dom  # the script ran
    features = dom.split('id="features"', 1)[1].split("</table>", 1)[0]
    assert (
        '<td class="w-partial">partial 1/2, refuses</td>' in features
    )  # the feature table: the error refuses
    assert '<td class="w-unknown">unknown</td>' in features  # a feature nothing here tests
    assert len(_visible_rows(dom)) == 3
    dom = _dump_dom(browser, page, "?outcome=error")
    assert "1 of 3 cells shown" in dom
    (row,) = _visible_rows(dom)
    assert "fsdp2-dsd_full-dcp-adamw-mlp-w2" in row and "RuntimeError: setStorage: out of bounds" in row
    dom = _dump_dom(browser, page, "?storage=torch_save&world_size=2")
    (row,) = _visible_rows(dom)
    assert "unsupported" in row


def test_a_published_default_page_loads_fast_in_a_headless_browser(tmp_path: Path) -> None:
    """matrix.html of a published default table (the largest page: every run cell with its
    detail) loads and runs its script in headless chromium within a few seconds more than an
    empty page takes (bench/README.md: about 0.7 s on the reference machine)."""
    browser = _chromium()
    if browser is None:
        if os.environ.get("CONFORMANCE_REQUIRE_BROWSER"):
            pytest.fail("CONFORMANCE_REQUIRE_BROWSER is set and no chromium is installed")
        pytest.skip("no chromium on this machine (.ci/run installs Debian's)")
    import time

    pages = sorted((ROOT / "reports").glob("torch-*-cpu-gloo/matrix.html"), key=lambda p: p.stat().st_size)
    largest = pages[-1]
    empty = (
        largest.parent.parent / "index.html"
    )  # a small page of the same reports, for the browser's own start

    def load(page: Path) -> tuple[float, str]:
        start = time.monotonic()
        dom = _dump_dom(browser, page, "")
        return time.monotonic() - start, dom

    small, _ = load(empty)
    took, dom = load(largest)
    shown = re.search(r"(\d+) of (\d+) cells shown", dom)
    assert shown and shown.group(1) == shown.group(2) != "0", largest  # the script ran over every row
    assert took - small < 5.0, f"{largest}: {took:.1f} s against {small:.1f} s for {empty.name}"

"""How long a published matrix.html takes to load in headless chromium (--dump-dom: parse, run
the filter script, serialise), against an empty page for the browser's own start, each page
loaded REPEATS times in turn, medians printed. Pages: the arguments, or the published default
tables of this checkout.

    python bench/html_load.py [PAGE.html ...]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 5


def load(browser: str, page: Path) -> float:
    start = time.monotonic()
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{page.resolve()}"],
        capture_output=True,
        check=True,
        timeout=300,
    )
    return time.monotonic() - start


def main() -> int:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("no chromium on this machine", file=sys.stderr)
        return 2
    pages = [Path(p) for p in sys.argv[1:]] or sorted(ROOT.glob("reports/torch-*-cpu-gloo/matrix.html"))
    empty = Path(tempfile.mkdtemp()) / "empty.html"
    empty.write_text("<!doctype html><html><body><p>empty</p></body></html>")
    pages = [empty, *pages]
    times: dict[Path, list[float]] = {p: [] for p in pages}
    for _ in range(REPEATS):
        for page in pages:
            times[page].append(load(browser, page))
    base = statistics.median(times[pages[0]])
    for page in pages:
        median = statistics.median(times[page])
        print(f"{median:6.2f} s (+{median - base:5.2f} s)  {page.stat().st_size / 1e6:6.2f} MB  {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The published pages stay readable where people open them: matrix.md under 500 KB (where a code
host stops rendering a file comfortably; issue 51), and every finding a page's words link to
defined as a link target on that page."""

from __future__ import annotations

import re
from pathlib import Path

REPORTS = Path(__file__).resolve().parents[1] / "reports"
LIMIT = 500_000  # bytes
PAGES = sorted(REPORTS.glob("torch-*/matrix.md"))


def test_there_are_published_pages() -> None:
    assert PAGES, REPORTS


def test_every_published_matrix_md_is_under_500_kb() -> None:
    over = {p.parent.name: p.stat().st_size for p in PAGES if p.stat().st_size >= LIMIT}
    assert not over, f"matrix.md over {LIMIT} bytes: {over}"


def test_every_finding_a_page_links_to_has_its_target() -> None:
    for page in PAGES:
        text = page.read_text()
        linked = set(re.findall(r"\]\[([a-z0-9-]+)\]", text))
        defined = set(re.findall(r"^\[([a-z0-9-]+)\]: FINDINGS\.md#\1$", text, re.MULTILINE))
        assert linked <= defined, f"{page}: no target for {sorted(linked - defined)[:5]}"

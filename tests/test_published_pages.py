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


def too_large(pages: list[Path]) -> dict[str, int]:
    return {p.parent.name: p.stat().st_size for p in pages if p.stat().st_size >= LIMIT}


def without_target(text: str) -> set[str]:
    """The findings a page links to (reference links) that it defines no target for."""
    linked = set(re.findall(r"\]\[([a-z0-9-]+)\]", text))
    defined = set(re.findall(r"^\[([a-z0-9-]+)\]: FINDINGS\.md#\1$", text, re.MULTILINE))
    return linked - defined


def test_every_published_matrix_md_is_under_500_kb() -> None:
    assert not too_large(PAGES), f"matrix.md over {LIMIT} bytes: {too_large(PAGES)}"


def test_every_finding_a_page_links_to_has_its_target() -> None:
    for page in PAGES:
        assert not without_target(page.read_text()), (
            f"{page}: no target for {sorted(without_target(page.read_text()))[:5]}"
        )


def test_the_checks_catch_a_large_page_and_a_dangling_link(tmp_path: Path) -> None:
    big = tmp_path / "torch-x" / "matrix.md"
    big.parent.mkdir()
    big.write_text("x" * LIMIT)
    assert too_large([big]) == {"torch-x": LIMIT}
    page = "|[drifts][a-b]|[refuses][c]|\n\n[a-b]: FINDINGS.md#a-b\n"
    assert without_target(page) == {"c"}

"""A rank's trace of its calls under test (conformance.world.attribution): what the world reads
of a rank that never ended a cell must never be an entry older than where the rank is."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.world.attribution import UNTRACED, CallTrace, waiting_in


def test_the_trace_names_the_innermost_call(tmp_path: Path) -> None:
    path = tmp_path / "rank0.in"
    trace = CallTrace(path)
    with trace.inside("strategy.load"):
        assert waiting_in(path) == "strategy.load"
        with trace.inside(""):
            assert waiting_in(path) == ""
    assert waiting_in(path) == ""
    assert waiting_in(tmp_path / "rank1.in") == ""  # never traced: not inside any call


def test_a_write_that_fails_leaves_no_stale_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Leaving the load, the write of "" fails: the old "strategy.load" must not stand (it would
    blame the strategy for a wait in the harness); the trace reads UNTRACED until a write works."""
    path = tmp_path / "rank0.in"
    trace = CallTrace(path)
    write_text = Path.write_text
    with trace.inside("strategy.load"):
        monkeypatch.setattr(Path, "write_text", _fails)
    assert waiting_in(path) == UNTRACED
    monkeypatch.setattr(Path, "write_text", write_text)
    with trace.inside("strategy.save"):
        assert waiting_in(path) == "strategy.save"


def test_a_first_write_that_fails_is_untraced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rank0.in"
    monkeypatch.setattr(Path, "write_text", _fails)
    with CallTrace(path).inside("strategy.load"):
        assert waiting_in(path) == UNTRACED


def test_an_unreadable_trace_is_untraced(tmp_path: Path) -> None:
    (tmp_path / "rank0.in").mkdir()
    assert waiting_in(tmp_path / "rank0.in") == UNTRACED


def _fails(self: Path, *args: object, **kwargs: object) -> int:
    raise OSError(28, "No space left on device")

"""Who raised: the code under test, or the harness around it.

A cell runs two kinds of code on a rank: the code under test (a strategy's calls and the
framework code they reach) and the harness's own (training, reading the state, comparing,
the world's plumbing). An exception of the first kind is the cell's `error`; one of the
second is a `harness-error`, a fault of this suite that must never read as the strategy's
outcome. Code under test runs inside `code_under_test(...)`, which marks what escapes it;
everything unmarked is the harness's. A check's own verdict that a cell cannot mean anything
(`CheckVerdict`, e.g. "the fresh model already equals the trained one") is about the code under
test too, and counts as its error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_MARK = "_conformance_raised_in"
UNTRACED = "?"  # waiting_in's answer for a rank whose trace could not be written: nobody knows


class CheckVerdict(AssertionError):
    """Raised by a check on purpose, about the code under test: the cell is its error."""


@dataclass
class CallTrace:
    """Where this rank is: the calls under test it is inside, innermost last, each entry and
    exit written to `path` (the innermost call, or "" in the harness's own code), so that the
    world can tell, of a rank that never ends a cell, whether it waits inside the code under
    test or in the harness around it. One per rank process, set for each cell (`tracing`)."""

    path: Path | None = None
    calls: list[str] = field(default_factory=list)

    def _write(self) -> None:
        if self.path is None:
            return
        try:
            self.path.write_text(self.calls[-1] if self.calls else "")
            _untraced(self.path).unlink(missing_ok=True)
        except OSError:
            # The old entry must not stand for where this rank is now: it is moved aside (a
            # rename needs no space), or an empty marker says so, and `waiting_in` answers
            # UNTRACED until a later write succeeds.
            with contextlib.suppress(OSError):
                try:
                    self.path.replace(_untraced(self.path))
                except FileNotFoundError:
                    _untraced(self.path).touch()

    @contextlib.contextmanager
    def inside(self, call: str) -> Iterator[None]:
        """The body runs inside `call` ("" for the harness's own code), traced."""
        self.calls.append(call)
        self._write()
        try:
            yield
        finally:
            self.calls.pop()
            self._write()


_TRACE = CallTrace()  # this process's: a rank runs one cell at a time


@contextlib.contextmanager
def tracing(path: Path) -> Iterator[None]:
    """Record at `path`, while the body runs, which call under test this rank is inside."""
    _TRACE.path, _TRACE.calls = path, []
    _TRACE._write()
    try:
        yield
    finally:
        _TRACE.path, _TRACE.calls = None, []


def trace_path(cell_dir: Path, rank: int) -> Path:
    """Where a rank traces its calls under test during a cell."""
    return cell_dir / f"rank{rank}.in"


def _untraced(path: Path) -> Path:
    return path.with_suffix(".untraced")


def waiting_in(path: Path) -> str:
    """The call under test a rank traced at `path` is inside: "" for the harness's own code or
    where it never traced, UNTRACED where its last trace could not be written or this cannot
    read it (a world must then not attribute the wait to either side)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return UNTRACED if _untraced(path).exists() else ""
    except OSError:
        return UNTRACED


@contextlib.contextmanager
def code_under_test(call: str) -> Iterator[None]:
    """Run the body as code under test: an exception escaping it is marked with `call` (for
    example "strategy.load") and goes on its way unchanged (type, message, traceback). The
    innermost call names it."""
    try:
        with _TRACE.inside(call):
            yield
    except BaseException as exc:
        if raised_in(exc) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(exc, _MARK, call)
        raise


@contextlib.contextmanager
def harness_code() -> Iterator[None]:
    """Run the body as the harness's own code even inside `code_under_test` (a template the harness
    shapes within a strategy's load): an exception escaping it is a harness-error, never the
    strategy's."""
    try:
        with _TRACE.inside(""):
            yield
    except BaseException as exc:
        if raised_in(exc) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(exc, _MARK, "")
        raise


def raised_in(exc: BaseException) -> str | None:
    """The call under test an exception escaped from (or "check verdict"), None for the
    harness's own."""
    if isinstance(exc, CheckVerdict):
        return "check verdict"
    return getattr(exc, _MARK, None)


def error_status(raised_in: str) -> str:
    """How a cell whose first error escaped `raised_in` ("" for the harness's own code) ended:
    the one rule the pool's worlds, torchrun and the launch share."""
    return "error" if raised_in else "harness-error"

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

_MARK = "_conformance_raised_in"


class CheckVerdict(AssertionError):
    """Raised by a check on purpose, about the code under test: the cell is its error."""


@contextlib.contextmanager
def code_under_test(call: str) -> Iterator[None]:
    """Run the body as code under test: an exception escaping it is marked with `call` (for
    example "strategy.load") and goes on its way unchanged (type, message, traceback). The
    innermost call names it."""
    try:
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

"""One test per registered check (conformance/check/registry.py), named `test_<check>`, and one
test per cell of the matrix profile (`--matrix`) under it; ids are the cell ids. A new check
needs nothing here: its test appears with its registration.

Round trip: train, save model + optimizer, load into a fresh model, compare bitwise. Resume:
the loaded run trains on, step for step like the one never stopped. Reshard: save at N ranks,
load at M. Interop: save with one configuration, load with another. Hygiene: a full
checkpoint loads with strict=True into the plain model. Corrupt: a damaged checkpoint must
raise on load.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from conformance.check.base import Check
from conformance.check.registry import CHECKS


def _test_of(check: Check) -> Callable[..., None]:
    """`test_<check>(<check>_case, conformance_cell)`: pytest reads the fixtures it takes from
    the signature, so the cells come from the check's own fixture."""

    def test(**fixtures: Any) -> None:
        fixtures["conformance_cell"](fixtures[check.fixture])

    names = (check.fixture, "conformance_cell")
    test.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    )
    test.__name__ = test.__qualname__ = f"test_{check.name}"
    test.__doc__ = check.title
    return test


for _check in CHECKS.values():
    globals()[f"test_{_check.name}"] = _test_of(_check)

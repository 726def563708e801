"""Interop: one configuration saves, another (wrapper, state-dict API, storage) loads; the
square save x load grid, the diagonal included."""

from collections.abc import Callable

from conformance.case import Transfer


def test_interop(interop_case: Transfer, conformance_cell: Callable[[Transfer], object]) -> None:
    conformance_cell(interop_case)

"""Round trip: train, save model + optimizer, load into a fresh model, compare bitwise.

One test per cell of the matrix profile (`--matrix`); ids are the cell ids.
"""

from collections.abc import Callable

from conformance.case import Case


def test_roundtrip(roundtrip_case: Case, conformance_cell: Callable[[Case], object]) -> None:
    conformance_cell(roundtrip_case)

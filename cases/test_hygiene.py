"""Key hygiene: a full checkpoint loads with strict=True into the plain, unwrapped model."""

from collections.abc import Callable

from conformance.case import Case


def test_hygiene(hygiene_case: Case, conformance_cell: Callable[[Case], object]) -> None:
    conformance_cell(hygiene_case)

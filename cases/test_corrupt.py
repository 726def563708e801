"""Bad checkpoints: truncated, flipped bytes, deleted files, another model; the load must raise."""

from collections.abc import Callable

from conformance.case import Case


def test_corrupt(corrupt_case: Case, conformance_cell: Callable[[Case], object]) -> None:
    conformance_cell(corrupt_case)

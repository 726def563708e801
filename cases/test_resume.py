"""Resume: train, save, train on (run A); load in a fresh world and train on (run B); the
losses and the final state of A and B must be bitwise equal."""

from collections.abc import Callable

from conformance.case import Case


def test_resume(resume_case: Case, conformance_cell: Callable[[Case], object]) -> None:
    conformance_cell(resume_case)

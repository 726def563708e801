"""Resharding: save in a world of N ranks, load in a separate world of M ranks; the state by
original parameter name must be bitwise equal, or the load must refuse where it cannot work."""

from collections.abc import Callable

from conformance.case import Transfer


def test_reshard(reshard_case: Transfer, conformance_cell: Callable[[Transfer], object]) -> None:
    conformance_cell(reshard_case)

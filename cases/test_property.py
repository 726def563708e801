"""Properties: hypothesis generates models (shapes, bias, tied layers, wrapping) and optimizer
schedules; each example runs as a cell in the warm worlds, and a failure shrinks to the
smallest failing configuration, reported in results.json and the matrix.

One test per property of the matrix profile: round trip, resharding, resume.
"""

from collections.abc import Callable

from conformance.property import Property


def test_property(property_case: Property, conformance_property: Callable[[Property], object]) -> None:
    conformance_property(property_case)

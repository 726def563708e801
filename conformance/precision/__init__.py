"""The precision axis: one Precision object per value (conformance.precision.registry)."""

"""The optimizer axis: one Optimizer object per value (conformance.optim.registry)."""

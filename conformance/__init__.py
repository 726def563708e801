"""A conformance suite for checkpointing in sharded PyTorch training.

The flow, one module each: ``case`` (what to test) -> ``world`` (where it runs) ->
``strategy`` (the thing under test) -> ``check`` (what is compared) -> ``outcome``
(the result of one cell) -> ``report`` (results.json and the tables).
"""

__version__ = "0.1.0"

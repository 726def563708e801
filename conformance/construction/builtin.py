"""The constructions the matrix has built in. A new one is a Construction here (or in a module of
its own) and its line in conformance/construction/registry.py; from outside the package, `register`
in a pytest plugin."""

from __future__ import annotations

from conformance.construction.base import Construction

CONSTRUCTIONS: tuple[Construction, ...] = (
    Construction("ctor", "the model's constructor on every rank"),
    Construction(
        "meta",
        "on the meta device, then to_empty() and reset_parameters() (by FSDP1 while wrapping), then the load",
        on_meta=True,
    ),
    Construction(
        "rank0init",
        "rank-0 init: the constructor on rank 0, the meta device elsewhere (then to_empty() and "
        "reset_parameters(), by FSDP1 while wrapping), then the full state loaded or broadcast from rank 0",
        on_meta=True,
        rank0_builds=True,
    ),
)

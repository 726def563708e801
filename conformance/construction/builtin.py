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
    Construction(
        "rank0bcast",
        "a pitfall on purpose: rank-0 init as broadcast_from_rank0's StateDictOptions describes it (rank 0 "
        "holds the full state and broadcasts it): the constructor on rank 0, the meta device elsewhere, then "
        "to_empty() and the load, without the model's own reset_parameters(); what no state dict holds (a "
        "non-persistent buffer) keeps the storage to_empty() gave it",
        on_meta=True,
        rank0_builds=True,
        initialise=False,
    ),
)

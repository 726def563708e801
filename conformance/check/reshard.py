"""The reshard check: the same strategy saves in a world of N ranks and loads in a separate
world of M; the state by original parameter name must be bitwise equal, or the load must
refuse where it cannot work by design (conformance.check.transfer runs it)."""

from __future__ import annotations

from conformance.check import transfer
from conformance.check.base import Check, Feature, ReshardCells
from conformance.check.slices import MAIN_APIS, MAIN_WRAPPERS, Slice

RESHARD_SLICE = Slice("resharding", MAIN_WRAPPERS, MAIN_APIS)
RESHARD_PAIRS: tuple[tuple[int, int], ...] = ((1, 2), (2, 1), (2, 4), (4, 2))

CHECK = Check(
    name="reshard",
    title="Resharding: saved in N ranks, loaded in a separate world of M",
    shape=ReshardCells(
        {
            "ci": ((RESHARD_SLICE, ((1, 2), (2, 1))),),
            "default": ((RESHARD_SLICE, RESHARD_PAIRS),),
            "full": ((RESHARD_SLICE, RESHARD_PAIRS),),
        }
    ),
    execute=transfer.execute,
    features=(Feature("reshard", "loads in another world size (or refuses)"),),
    registered=True,
    properties=True,
)

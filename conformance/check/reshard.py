"""The reshard check: the same strategy saves in a world of N ranks and loads in a separate
world of M; the state by original parameter name must be bitwise equal, or the load must
refuse where it cannot work by design (conformance.check.transfer runs it)."""

from __future__ import annotations

from conformance.check import transfer
from conformance.check.base import Check, Feature, ReshardCells
from conformance.check.fused_cells import RESHARD_FUSED_SLICE
from conformance.check.slices import MAIN_APIS, MAIN_WRAPPERS, Slice
from conformance.precision.registry import other_precisions

RESHARD_SLICE = Slice("resharding", MAIN_WRAPPERS, MAIN_APIS)
RESHARD_PAIRS: tuple[tuple[int, int], ...] = ((1, 2), (2, 1), (2, 4), (4, 2))
# each precision, through DCP (a GradScaler's scale and bf16 state into a world of twice the ranks)
RESHARD_PRECISION_SLICE = Slice(
    "resharding, precisions",
    (("ddp", "replicate"), ("fsdp1", "full_shard"), ("fsdp2", "shard")),
    ("dsd_sharded",),
    storages=("dcp",),
    precisions=other_precisions,
)

CHECK = Check(
    name="reshard",
    title="Resharding: saved in N ranks, loaded in a separate world of M",
    shape=ReshardCells(
        {
            "ci": ((RESHARD_SLICE, ((1, 2), (2, 1))),),
            "default": ((RESHARD_SLICE, RESHARD_PAIRS), (RESHARD_PRECISION_SLICE, ((2, 4),))),
            "full": ((RESHARD_SLICE, RESHARD_PAIRS), (RESHARD_PRECISION_SLICE, ((2, 4), (4, 2)))),
        },
        # a registered strategy in the gate: into twice the ranks and back, as the built-in rows
        # (its 4-rank worlds cost most of a library row's gate time; default and full keep every pair)
        strategy_pairs={"ci": ((1, 2), (2, 1))},
        declared_parts={
            profile: ((RESHARD_FUSED_SLICE, ((2, 4), (4, 2))),) for profile in ("default", "full")
        },
    ),
    execute=transfer.execute,
    features=(Feature("reshard", "loads in another world size (or refuses)"),),
    registered=True,
    properties=True,
)

"""The interop check: another wrapper, state-dict API or storage loads what one configuration
saved, the square save x load grid with its diagonal (conformance.check.transfer runs it)."""

from __future__ import annotations

from conformance.check import transfer
from conformance.check.base import Check, Feature, GridCells

# The configurations people move checkpoints between (wrapper, sharding, api, storage).
INTEROP_CONFIGS: tuple[tuple[str, str, str, str], ...] = (
    ("ddp", "replicate", "dsd_sharded", "dcp"),
    ("ddp", "replicate", "sd_full", "torch_save"),
    ("fsdp1", "full_shard", "dsd_sharded", "dcp"),
    ("fsdp1", "full_shard", "sd_full", "torch_save"),
    ("fsdp1", "full_shard", "sd_sharded", "torch_save_per_rank"),
    ("fsdp2", "shard", "dsd_full", "torch_save"),
    ("fsdp2", "shard", "dsd_sharded", "dcp"),
    ("plain", "none", "sd_full", "torch_save"),
    # through DCP's format conversion (format_utils): these load what dcp / torch_save wrote
    ("fsdp2", "shard", "dsd_full", "dcp_to_torch_save"),
    ("ddp", "replicate", "dsd_full", "torch_save_to_dcp"),
)

CHECK = Check(
    name="interop",
    title="Interop: saved by the row's configuration, loaded by the column's",
    shape=GridCells(INTEROP_CONFIGS, {"ci": (2,), "default": (2,), "full": (1, 2, 4)}),
    execute=transfer.execute,
    features=(
        Feature("interop out", "others load what it saved"),
        Feature("interop in", "it loads what others saved", by_loader=True),
    ),
    registered=True,
)

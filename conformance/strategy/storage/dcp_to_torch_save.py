"""dcp_to_torch_save: saved as a DCP directory, loaded after DCP's own conversion to one
torch.save file (torch.distributed.checkpoint.format_utils.dcp_to_torch_save, run by rank 0 as
a user runs it once, offline); every rank reads that file. It reads what `dcp` writes, so the
interop grid loads dcp checkpoints through it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from conformance.strategy.protocol import StateDict
from conformance.strategy.storage.dcp import DcpDirectory
from conformance.world import RankContext


@dataclass(frozen=True)
class DcpToTorchSave(DcpDirectory):
    name: str = "dcp_to_torch_save"
    one_file_by_rank0: bool = True  # what is loaded: one converted file that every rank reads
    loads_in_place: bool = False
    representative: bool = False
    reads: tuple[str, ...] = ("dcp",)

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        converted = path.with_name(path.name + ".converted.pt")
        if ctx.rank == 0:
            dcp_to_torch_save(str(path), str(converted))
        dist.barrier()
        return torch.load(converted, map_location=ctx.device, weights_only=False)

"""torch_save_to_dcp: saved as one torch.save file by rank 0, loaded after DCP's own conversion
to a DCP directory (torch.distributed.checkpoint.format_utils.torch_save_to_dcp, run by rank 0),
in place into the fresh model's state dict as dcp loads. It reads what `torch_save` writes, so
the interop grid loads torch_save checkpoints through it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from conformance.strategy.protocol import StateDict
from conformance.strategy.storage.rank_zero import RankZeroFile
from conformance.world import RankContext


@dataclass(frozen=True)
class TorchSaveToDcp(RankZeroFile):
    name: str = "torch_save_to_dcp"
    loads_in_place: bool = True
    reads: tuple[str, ...] = ("torch_save",)

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.format_utils import torch_save_to_dcp

        converted = path.with_name(path.name + ".dcp")
        if ctx.rank == 0:
            torch_save_to_dcp(str(path / self.file_name), str(converted))
        dist.barrier()
        state = template()
        dcp.load(state, checkpoint_id=str(converted))
        return state

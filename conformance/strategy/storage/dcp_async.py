"""dcp_async: torch.distributed.checkpoint.async_save, its future awaited before the save
returns (so before any load); and dcp_async_busy, which keeps working while the save is in
flight: every tensor of the live state it was handed is changed in place, as the next
optimizer step changes parameters and optimizer state, until the future completes, then put
back bitwise. The checkpoint must hold the state at the call (async_save stages it first, as
documented), never what the work in flight made of it. A directory DCP reads like dcp's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from conformance.strategy.protocol import StateDict
from conformance.strategy.storage.dcp import DcpDirectory
from conformance.world import RankContext


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every floating-point tensor in a nested state dict (what a training step changes)."""
    if isinstance(value, torch.Tensor):
        return [value] if torch.is_floating_point(value) else []
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


@dataclass(frozen=True)
class DcpAsync(DcpDirectory):
    """async_save; busy: the live state changes in place while the save is in flight."""

    name: str = "dcp_async"
    representative: bool = False
    busy: bool = False

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        import torch.distributed.checkpoint as dcp

        future = dcp.async_save(state, checkpoint_id=str(path))
        if not self.busy:
            future.result()
            return
        live = tensors_in(state)
        with torch.no_grad():
            kept = [t.clone() for t in live]
            for tensor in live:  # the step the training loop takes while the checkpoint uploads
                tensor.add_(1.0)
            try:
                future.result()
            finally:
                for tensor, value in zip(live, kept, strict=True):
                    tensor.copy_(value)


DCP_ASYNC = DcpAsync()
DCP_ASYNC_BUSY = DcpAsync(name="dcp_async_busy", busy=True)

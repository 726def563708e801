"""Lightning inside a world the suite has already started: a cluster environment that adopts
the running process group, the accelerator of the world's device, and FSDP1 on the CPU
(wrapped before Lightning sees it). Used by every Lightning adapter (conformance.adapters.lightning).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from conformance.case import Case
from conformance.world import RankContext


def existing_group_environment() -> Any:
    """A Lightning ClusterEnvironment that adopts the process group already running."""
    import torch.distributed as dist
    from lightning.fabric.plugins.environments import ClusterEnvironment

    class ExistingProcessGroup(ClusterEnvironment):
        @property
        def creates_processes_externally(self) -> bool:
            return True

        @property
        def main_address(self) -> str:
            return "127.0.0.1"

        @property
        def main_port(self) -> int:
            return 0

        @staticmethod
        def detect() -> bool:
            return dist.is_initialized()

        def world_size(self) -> int:
            return dist.get_world_size()

        def set_world_size(self, size: int) -> None:
            pass

        def global_rank(self) -> int:
            return dist.get_rank()

        def set_global_rank(self, rank: int) -> None:
            pass

        def local_rank(self) -> int:
            return dist.get_rank()

        def node_rank(self) -> int:
            return 0

    return ExistingProcessGroup()


def accelerator(ctx: RankContext) -> Any:
    """Fabric's accelerator for the world's device."""
    from lightning.fabric.accelerators import CPUAccelerator, CUDAAccelerator

    return CUDAAccelerator() if ctx.device.type == "cuda" else CPUAccelerator()


def fsdp1_cpu_prewrap(model: nn.Module, case: Case, ctx: RankContext) -> nn.Module:
    """On CPU the model is wrapped before Lightning sees it, the way Lightning's FSDPStrategy
    wraps it (FULL_SHARD etc., use_orig_params=True, every Linear a unit) but with device_id
    the CPU device: Lightning passes `root_device.index`, None for a CPU device, which FSDP1
    refuses ("FSDP needs a non-CPU accelerator device"). Lightning keeps a model it finds
    wrapped (Fabric's and the Trainer's strategy alike). On a GPU: the model as it is."""
    if ctx.device.type != "cpu":
        return model
    from conformance.strategy.wrappers import Fsdp1Wrapper

    return Fsdp1Wrapper(case.sharding, use_orig_params=True).wrap(model, ctx)

"""Pipeline parallelism: each rank is one stage of the model, split by hand as torchtitan
splits it (the model's `keep_stage`: the stage keeps its modules under the full model's names
and drops the others), trained with torch.distributed.pipelining's PipelineStage and
ScheduleGPipe, as their documentation builds them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from conformance.world import RankContext

MICROBATCHES = 2


class PipelineStep:
    """The stage's training step (the harness calls it for `model(x)` + loss + backward): the
    schedule runs forward and backward of every microbatch; the last stage's loss (the mean of
    its microbatches') goes to every rank."""

    def __init__(self, module: nn.Module, ctx: RankContext, loss: Callable[..., torch.Tensor]) -> None:
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        self.ctx = ctx
        self.stage = PipelineStage(module, ctx.rank, ctx.world_size, ctx.device)
        self.schedule = ScheduleGPipe(self.stage, n_microbatches=MICROBATCHES, loss_fn=loss)

    def __call__(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        first, last = self.ctx.rank == 0, self.ctx.rank == self.ctx.world_size - 1
        losses: list[torch.Tensor] = []
        kwargs: dict[str, object] = {"target": target, "losses": losses} if last else {}
        if first:
            self.schedule.step(x, **kwargs)
        else:
            self.schedule.step(**kwargs)
        mean = torch.stack(losses).mean().detach() if last else torch.zeros((), device=x.device)
        if self.ctx.world_size > 1:
            dist.broadcast(mean, src=self.ctx.world_size - 1)
        return mean


@dataclass(frozen=True)
class PipelineWrapper:
    """One stage per rank; the stage module carries its step as `pipeline_step`."""

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        keep_stage = getattr(model, "keep_stage", None)
        if keep_stage is None:
            raise ValueError(f"{type(model).__name__} declares no pipeline split (keep_stage)")
        keep_stage(ctx.rank, ctx.world_size)
        model = model.to(ctx.device)
        model.pipeline_step = PipelineStep(model, ctx, type(model).loss)  # type: ignore[attr-defined]
        return model

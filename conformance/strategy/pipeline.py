"""Pipeline parallelism: each rank is one stage of the model, split by hand as torchtitan
splits it (the model's `keep_stage`: the stage keeps its modules under the full model's names
and drops the others), trained with torch.distributed.pipelining's PipelineStage and
ScheduleGPipe, as their documentation builds them. With a (stages, dp) mesh, as torchtitan
composes PP with FSDP: each stage is fully sharded (FSDP2) over the "dp" ranks that hold it,
and each dp coordinate is a pipeline of its own, on batches of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from conformance.strategy.wrappers import fully_shard_model
from conformance.world import RankContext

MICROBATCHES = 2
MESH_DIMS = ("pp", "dp")


class PipelineStep:
    """The stage's training step (the harness calls it for `model(x)` + loss + backward): the
    schedule runs forward and backward of every microbatch; the last stage's loss (the mean of
    its microbatches') goes to every stage of the pipeline. group: the pipeline's ranks (None:
    every rank, one stage each)."""

    def __init__(
        self,
        module: nn.Module,
        ctx: RankContext,
        loss: Callable[..., torch.Tensor],
        stage: int,
        stages: int,
        group: Any = None,
    ) -> None:
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        self.indices, self.stages, self.group = (stage,), stages, group
        self.stage = PipelineStage(module, stage, stages, ctx.device, group=group)
        self.schedule = ScheduleGPipe(self.stage, n_microbatches=MICROBATCHES, loss_fn=loss)
        self.last_rank = stages - 1 if group is None else dist.get_global_rank(group, stages - 1)

    def __call__(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        first, last = 0 in self.indices, self.stages - 1 in self.indices
        losses: list[torch.Tensor] = []
        kwargs: dict[str, object] = {"target": target, "losses": losses} if last else {}
        if first:
            self.schedule.step(x, **kwargs)
        else:
            self.schedule.step(**kwargs)
        mean = torch.stack(losses).mean().detach() if last else torch.zeros((), device=x.device)
        if self.stages > 1:
            dist.broadcast(mean, src=self.last_rank, group=self.group)
        return mean


class InterleavedStep(PipelineStep):
    """Several stages per rank, run by ScheduleInterleaved1F1B (its documented use: a list of the
    rank's PipelineStages, stage i on rank i % world size, as torchtitan assigns them)."""

    def __init__(
        self,
        parts: list[nn.Module],
        indices: tuple[int, ...],
        ctx: RankContext,
        loss: Callable[..., torch.Tensor],
    ) -> None:
        from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B

        self.indices, self.stages, self.group = indices, len(indices) * ctx.world_size, None
        stages = [
            PipelineStage(part, i, self.stages, ctx.device) for part, i in zip(parts, indices, strict=True)
        ]
        self.schedule = ScheduleInterleaved1F1B(stages, n_microbatches=MICROBATCHES, loss_fn=loss)
        self.last_rank = (self.stages - 1) % ctx.world_size


def _split(model: nn.Module, stage: int, stages: int) -> None:
    keep_stage = getattr(model, "keep_stage", None)
    if keep_stage is None:
        raise ValueError(f"{type(model).__name__} declares no pipeline split (keep_stage)")
    keep_stage(stage, stages)


@dataclass(frozen=True)
class PipelineWrapper:
    """One stage per rank; the stage module carries its step as `pipeline_step`."""

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        _split(model, ctx.rank, ctx.world_size)
        model = model.to(ctx.device)
        model.pipeline_step = PipelineStep(model, ctx, type(model).loss, ctx.rank, ctx.world_size)  # type: ignore[attr-defined]
        return model


@dataclass(frozen=True)
class InterleavedWrapper:
    """Several stages per rank (interleaved 1F1B): the model's pipeline units (`keep_units`,
    `unit_view`) as stages, stage i on rank i % world size. The rank's module keeps its units'
    modules under the full model's names (its state dict, what a checkpoint holds); each stage
    runs a view of one unit that shares them; `pipeline_parts` are those views (a framework's
    model parts, one optimizer each)."""

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        units = getattr(model, "pipeline_units", None)
        if units is None:
            raise ValueError(f"{type(model).__name__} declares no pipeline units (pipeline_units)")
        total = units()
        if total % ctx.world_size or total // ctx.world_size < 2:
            raise ValueError(
                f"{total} pipeline units cannot be two or more stages on each of {ctx.world_size} ranks"
            )
        indices = tuple(range(ctx.rank, total, ctx.world_size))
        model.keep_units(indices)  # type: ignore[operator]
        model = model.to(ctx.device)
        parts = [model.unit_view(i) for i in indices]  # type: ignore[operator]
        model.pipeline_parts = parts  # type: ignore[attr-defined]
        model.pipeline_step = InterleavedStep(parts, indices, ctx, type(model).loss)  # type: ignore[attr-defined]
        return model


@dataclass(frozen=True)
class PipelineFsdpWrapper:
    """Stages over the mesh's "pp" dimension, each fully sharded over its "dp" dimension
    (torchtitan: the stage's model parallelized, then PipelineStage on the pp group)."""

    mesh_shape: tuple[int, int]

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(ctx.device.type, self.mesh_shape, mesh_dim_names=MESH_DIMS)
        stage, stages = mesh["pp"].get_local_rank(), self.mesh_shape[0]
        _split(model, stage, stages)
        model = fully_shard_model(model.to(ctx.device), mesh["dp"], ctx)
        step = PipelineStep(model, ctx, type(model).loss, stage, stages, mesh["pp"].get_group())
        model.pipeline_step = step  # type: ignore[attr-defined]
        return model

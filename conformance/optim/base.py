"""What the optimizer axes are: an optimizer (how to build the torch optimizer over the cell's
parameter groups), an LR scheduler (how to build it over the optimizer, and what its step takes),
and a Choice, one cell's optimizer token (conformance.case.optimizer_axes: the optimizer, its
implementation, its parameter groups and its scheduler, separate axes of one word of the id)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.axis import available

Make = Callable[..., torch.optim.Optimizer]  # (param groups, **implementation flags) -> optimizer


@dataclass(frozen=True)
class Optimizer:
    """name: the axis value, the first part of the optimizer word of every cell id. make: the torch
    optimizer over the parameter groups the harness builds (one group, or two with +groups), with
    an implementation's flag (foreach=True, fused=True) as a keyword where the cell asks for one.
    impls: the implementations the CPU build has besides the default. takes_groups: False where the
    optimizer refuses per-parameter options (LBFGS) or groups the parameters its own way.
    matrices: it is Muon with an AdamW for the rest, as Muon is used: `make` gets two groups, the
    2-D weight matrices (by the plain model's shapes, never an embedding's), then
    every other parameter (conformance.training.build_optimizer). optimizers: how many torch
    optimizers `make` builds (more than one: an OptimizerList, conformance.optim.several).
    covered_late: a value added to a published matrix: a covering profile chooses the other
    values' cells as if it did not exist (their ids stay), then adds its cells for the pairs they
    lack (conformance.matrix.cells). closure: its step re-evaluates the loss
    (`step(closure)`). low_precision_grads: it steps fp32 parameters whose gradients are of a lower
    precision (Tensor.grad_dtype). unavailable: why this torch lacks it (None: it has it).
    description: what it brings that the other values do not (its state's shapes, scalars)."""

    name: str
    make: Make
    description: str = ""
    impls: tuple[str, ...] = ()
    takes_groups: bool = True
    matrices: bool = False
    optimizers: int = 1
    covered_late: bool = False
    closure: bool = False
    low_precision_grads: bool = True
    unavailable: Callable[[], str | None] = field(default=available, compare=False)


@dataclass(frozen=True)
class Scheduler:
    """An LR scheduler stepped after each optimizer step and saved and loaded with it. make: the
    scheduler over the cell's optimizer. metric: its step takes the loss (ReduceLROnPlateau)."""

    name: str
    make: Callable[[torch.optim.Optimizer], Any]
    description: str = ""
    metric: bool = False


@dataclass(frozen=True)
class Choice:
    """One cell's optimizer token, resolved: the optimizer, its implementation ("", foreach, fused),
    whether the parameters are in two groups, and the scheduler (None: none)."""

    optimizer: Optimizer
    impl: str = ""
    groups: bool = False
    scheduler: Scheduler | None = None

    def make(self, groups: list[dict]) -> torch.optim.Optimizer:
        return self.optimizer.make(groups, **({self.impl: True} if self.impl else {}))

    @property
    def closure(self) -> bool:
        return self.optimizer.closure

    @property
    def scheduler_metric(self) -> bool:
        return self.scheduler is not None and self.scheduler.metric

"""What an optimizer axis value is: how to build the torch optimizer over the cell's parameter
groups, whether those are two groups with their own hyperparameters, and whether an LR scheduler
(saved with it) drives it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

Make = Callable[[list[dict]], torch.optim.Optimizer]


@dataclass(frozen=True)
class Optimizer:
    """name: the axis value, a word of every cell id. make: the torch optimizer over the
    parameter groups the harness builds (one group, or two with `groups`). groups: weights and
    biases in two groups, the biases without decay and at twice the LR. scheduler: a StepLR
    (step 2, gamma 0.5) steps after each optimizer step and is saved and loaded with it.
    description: what it brings that the other values do not (its state's shapes, scalars)."""

    name: str
    make: Make
    groups: bool = False
    scheduler: bool = False
    description: str = ""

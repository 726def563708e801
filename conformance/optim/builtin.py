"""The optimizers the matrix has built in. A new one is an Optimizer here (or in a module of its
own) and its line in conformance/optim/registry.py; from outside the package, `register` in a
pytest plugin (tests/new_optimizer_plugin.py)."""

from __future__ import annotations

import torch

from conformance.optim.base import Optimizer


def _adamw(groups: list[dict]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.01)


OPTIMIZERS: tuple[Optimizer, ...] = (
    Optimizer(
        "sgd",
        lambda groups: torch.optim.SGD(groups, lr=1e-2, momentum=0.9),
        description="a momentum buffer per parameter, shaped like it",
    ),
    Optimizer(
        "adam",
        lambda groups: torch.optim.Adam(groups, lr=1e-2),
        description="two moments shaped like the parameter and a 0-dim step",
    ),
    Optimizer("adamw", _adamw, description="Adam's state, decoupled weight decay"),
    Optimizer(
        "adamw+groups",
        _adamw,
        groups=True,
        description="AdamW over two parameter groups with their own lr and weight decay",
    ),
    Optimizer("adamw+sched", _adamw, scheduler=True, description="AdamW driven by a saved StepLR"),
)

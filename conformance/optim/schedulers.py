"""The stateful LR schedulers the matrix has built in: each keeps state that a resume must restore
(its step count, its cycle, the schedulers it chains, the best loss it has seen). A new one is a
Scheduler here and its line in conformance/optim/registry.py; from outside the package,
`register_scheduler` in a pytest plugin."""

from __future__ import annotations

import torch
from torch.optim import lr_scheduler as lrs

from conformance.optim.base import Scheduler


def _sequential(optim: torch.optim.Optimizer) -> lrs.LRScheduler:
    warmup = lrs.LinearLR(optim, start_factor=0.5, total_iters=2)
    decay = lrs.ExponentialLR(optim, gamma=0.9)
    return lrs.SequentialLR(optim, [warmup, decay], milestones=[2])


def _chained(optim: torch.optim.Optimizer) -> lrs.LRScheduler:
    return lrs.ChainedScheduler(
        [lrs.ConstantLR(optim, factor=0.5, total_iters=2), lrs.ExponentialLR(optim, gamma=0.9)]
    )


def _one_cycle(optim: torch.optim.Optimizer) -> lrs.LRScheduler:
    """OneCycleLR cycles momentum (or beta1) too where the optimizer has it: its documented
    default, which raises for an optimizer without either (Adagrad, Rprop, LBFGS, ...)."""
    cycles = any(key in optim.defaults for key in ("momentum", "betas"))
    return lrs.OneCycleLR(optim, max_lr=2e-2, total_steps=32, cycle_momentum=cycles)


SCHEDULERS: tuple[Scheduler, ...] = (
    # "sched" is StepLR's word since the matrix's first scheduler: the ids of published cells keep it
    Scheduler(
        "sched",
        lambda optim: lrs.StepLR(optim, step_size=2, gamma=0.5),
        description="StepLR (step 2, gamma 0.5): a step count",
    ),
    Scheduler(
        "onecycle",
        _one_cycle,
        description="OneCycleLR: the LR, and momentum (or betas) where the optimizer has them, cycled in the "
        "param groups",
    ),
    Scheduler(
        "cosine_restarts",
        lambda optim: lrs.CosineAnnealingWarmRestarts(optim, T_0=2, T_mult=2),
        description="CosineAnnealingWarmRestarts: the position in the current cycle (T_cur, T_i)",
    ),
    Scheduler(
        "sequential",
        _sequential,
        description="SequentialLR of LinearLR then ExponentialLR: the schedulers it holds and a milestone",
    ),
    Scheduler(
        "chained",
        _chained,
        description="ChainedScheduler of ConstantLR and ExponentialLR: both stepped each step",
    ),
    Scheduler(
        "plateau",
        lambda optim: lrs.ReduceLROnPlateau(optim, mode="min", factor=0.5, patience=0, threshold=0.0),
        description="ReduceLROnPlateau stepped on the loss: the best loss and the bad-epoch count",
        metric=True,
    ),
)

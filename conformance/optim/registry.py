"""The optimizers, registered in one place: the matrix's slices, the training and the repro
scripts read this table. From outside the package, `register(optimizer)` in a module that pytest
imports (`-p your.module`); the ranks import that module too (plugin_modules)."""

from __future__ import annotations

import sys

from conformance.generated import ScheduleSpec, is_generated_optimizer
from conformance.optim import builtin
from conformance.optim.base import Optimizer

OPTIMIZERS: dict[str, Optimizer] = {optimizer.name: optimizer for optimizer in builtin.OPTIMIZERS}
DEFAULT_OPTIMIZER = "adamw"  # what a slice takes when it names none, the round trip's base column
_MODULES: dict[str, str] = {}  # name -> the module outside the package that registered it


def register(optimizer: Optimizer) -> Optimizer:
    """Adds an optimizer (or replaces the one of its name); returns it."""
    OPTIMIZERS[optimizer.name] = optimizer
    _MODULES[optimizer.name] = sys._getframe(1).f_globals.get("__name__", "")
    return optimizer


def optimizer_of(name: str) -> Optimizer:
    """A registered optimizer axis value, or a generated schedule's (adamw_lr0.03_s2, ...)."""
    if name in OPTIMIZERS:
        return OPTIMIZERS[name]
    if is_generated_optimizer(name):
        schedule = ScheduleSpec.parse(name)
        return Optimizer(name, schedule.make, scheduler=schedule.scheduler)
    raise ValueError(
        f"unknown optimizer {name!r}; known: {sorted(OPTIMIZERS)} and generated ones "
        "(a plugin's optimizer: register it in a module pytest imports, -p your.module)"
    )


def optimizer_names() -> tuple[str, ...]:
    """Every registered optimizer, sorted: the optimizers slice's values."""
    return tuple(sorted(OPTIMIZERS))


def plugin_modules() -> tuple[str, ...]:
    """The modules outside this package that registered an optimizer: each rank imports them."""
    return tuple(sorted({m for m in _MODULES.values() if m and not m.startswith("conformance.")}))


def in_param_groups(name: str) -> bool:
    """Whether the optimizer named puts the parameters in groups of their own (a rule's predicate:
    FSDP1 without use_orig_params has one flat parameter per unit)."""
    return optimizer_of(name).groups

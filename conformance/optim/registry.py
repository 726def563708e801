"""The optimizers, registered in one place: the matrix's slices, the training and the repro
scripts read this table. From outside the package, `register(optimizer)` in a module that pytest
imports (`-p your.module`); the ranks import that module too (plugin_modules)."""

from __future__ import annotations

from conformance.axis import Axis
from conformance.generated import ScheduleSpec, is_generated_optimizer
from conformance.optim import builtin
from conformance.optim.base import Optimizer

AXIS: Axis[Optimizer] = Axis("optimizer", builtin.OPTIMIZERS)
OPTIMIZERS = AXIS.values
DEFAULT_OPTIMIZER = "adamw"  # what a slice takes when it names none, the round trip's base column
register = AXIS.register  # adds an optimizer (or replaces the one of its name); returns it
plugin_modules = AXIS.plugin_modules


def optimizer_of(name: str) -> Optimizer:
    """A registered optimizer axis value, or a generated schedule's (adamw_lr0.03_s2, ...)."""
    if name in OPTIMIZERS:
        return OPTIMIZERS[name]
    if is_generated_optimizer(name):
        schedule = ScheduleSpec.parse(name)
        return Optimizer(name, schedule.make, scheduler=schedule.scheduler)
    raise AXIS.unknown(name, " and generated ones")


def optimizer_names() -> tuple[str, ...]:
    """Every registered optimizer, sorted: the optimizers slice's values."""
    return tuple(sorted(OPTIMIZERS))


def in_param_groups(name: str) -> bool:
    """Whether the optimizer named puts the parameters in groups of their own (a rule's predicate:
    FSDP1 without use_orig_params has one flat parameter per unit)."""
    return optimizer_of(name).groups

"""The optimizer axes, registered in one place: the optimizers, the LR schedulers, and the grammar of
a cell's optimizer word (conformance.case.optimizer_axes). The matrix's slices, the training and the
repro scripts read these. From outside the package, `register(optimizer)` or
`register_scheduler(scheduler)` in a module that pytest imports (`-p your.module`); the ranks import
that module too (plugin_modules)."""

from __future__ import annotations

import itertools

from conformance.axis import Axis
from conformance.case import GROUPS, optimizer_axes, optimizer_token
from conformance.generated import ScheduleSpec, is_generated_optimizer
from conformance.optim import builtin, muon, schedulers
from conformance.optim.base import Choice, Optimizer, Scheduler

PACKAGE_OPTIMIZERS = (*builtin.OPTIMIZERS, *muon.OPTIMIZERS)
AXIS: Axis[Optimizer] = Axis("optimizer", PACKAGE_OPTIMIZERS)
SCHEDULER_AXIS: Axis[Scheduler] = Axis("scheduler", schedulers.SCHEDULERS)
OPTIMIZERS = AXIS.values
SCHEDULERS = SCHEDULER_AXIS.values
DEFAULT_OPTIMIZER = "adamw"  # what a slice takes when it names none, the round trip's base column
STEP_LR = "sched"
register = AXIS.register  # adds an optimizer (or replaces the one of its name); returns it
register_scheduler = SCHEDULER_AXIS.register


def plugin_modules() -> tuple[str, ...]:
    return tuple(sorted({*AXIS.plugin_modules(), *SCHEDULER_AXIS.plugin_modules()}))


def optimizer_of(name: str) -> Choice:
    """A cell's optimizer word resolved (adamw, adam+fused, adamw+groups+onecycle, ...), or a
    generated schedule's (adamw_lr0.03_s2, ...)."""
    if is_generated_optimizer(name):
        schedule = ScheduleSpec.parse(name)
        plain = Optimizer(name, lambda groups, **_: schedule.make(groups))
        return Choice(plain, scheduler=SCHEDULERS[STEP_LR] if schedule.scheduler else None)
    axes = optimizer_axes(name)
    base = axes["base_optimizer"]
    if base not in OPTIMIZERS:
        raise AXIS.unknown(base, " and generated ones")
    scheduler = axes["scheduler"]
    if scheduler and scheduler not in SCHEDULERS:
        raise SCHEDULER_AXIS.unknown(scheduler)
    optimizer = OPTIMIZERS[base]
    if axes["optimizer_impl"] and axes["optimizer_impl"] not in optimizer.impls:
        raise ValueError(f"{base} has no {axes['optimizer_impl']} implementation; it has {optimizer.impls}")
    return Choice(
        optimizer,
        impl=axes["optimizer_impl"],
        groups=axes["param_groups"] == GROUPS,
        scheduler=SCHEDULERS[scheduler] if scheduler else None,
    )


def optimizer_names() -> tuple[str, ...]:
    """Each optimizer value once, the other axes at their plainest, and each other option once on
    the default optimizer: every registered optimizer, AdamW in two groups, under each scheduler,
    and in each implementation (the optimizers slice of ci and default)."""
    default = OPTIMIZERS[DEFAULT_OPTIMIZER]
    return tuple(
        sorted(
            {
                *OPTIMIZERS,
                optimizer_token(DEFAULT_OPTIMIZER, groups=True),
                *(optimizer_token(DEFAULT_OPTIMIZER, scheduler=s) for s in SCHEDULERS),
                *(optimizer_token(DEFAULT_OPTIMIZER, impl=i) for i in default.impls),
            }
        )
    )


# The ci gate's optimizers: the ones the suite's broken strategies are held to (tests/). Every other
# built-in value is in default's covering; an optimizer a plugin registers joins the gate too.
GATE_OPTIMIZERS = ("adam", "adamw", "adamw+groups", "adamw+sched", "sgd")


def gate_optimizers() -> tuple[str, ...]:
    """The ci declaration's optimizers: GATE_OPTIMIZERS and every plugin's optimizer."""
    return tuple(sorted({*GATE_OPTIMIZERS, *(n for n in OPTIMIZERS if not builtin_optimizer(n))}))


def optimizer_product() -> tuple[str, ...]:
    """Every optimizer in each implementation it has, in one group or two where it takes groups,
    without a scheduler or under each: the product the full profile declares and a covering
    chooses from."""
    out = []
    for name, optimizer in sorted(OPTIMIZERS.items()):
        groupings = (False, True) if optimizer.takes_groups else (False,)
        for impl, groups, scheduler in itertools.product(
            ("", *optimizer.impls), groupings, ("", *SCHEDULERS)
        ):
            out.append(optimizer_token(name, impl=impl, groups=groups, scheduler=scheduler))
    return tuple(sorted(out))


def builtin_optimizer(name: str) -> bool:
    """Whether the cell's optimizer is one the package has built in (not a plugin's)."""
    return optimizer_axes(name)["base_optimizer"] in {o.name for o in PACKAGE_OPTIMIZERS}


def in_param_groups(name: str) -> bool:
    """Whether the optimizer named puts the parameters in groups of their own (a rule's predicate:
    FSDP1 without use_orig_params has one flat parameter per unit)."""
    return optimizer_of(name).groups


def unavailable(name: str) -> str | None:
    """Why this torch cannot build the cell's optimizer (a skip), or None."""
    return optimizer_of(name).optimizer.unavailable()


def steps_with_closure(name: str) -> bool:
    """Whether the optimizer word's optimizer steps with a closure (LBFGS: a rule's predicate,
    GradScaler.step takes no closure)."""
    return optimizer_of(name).closure


def refuses_low_precision_grads(name: str) -> bool:
    """Whether the optimizer word's optimizer cannot step fp32 parameters with lower-precision
    gradients (Adam's family, and RMSprop with centered=True as the matrix configures it: "expected
    dtype float for `end` but got dtype c10::BFloat16", a lerp of the fp32 state towards the
    gradient; a rule's predicate)."""
    return not optimizer_of(name).optimizer.low_precision_grads


def steps_matrices(name: str) -> bool:
    """Whether the optimizer word's optimizer is Muon on the weight matrices (Optimizer.matrices:
    a rule's predicate, a layout that flattens the parameters refuses it; a generated schedule's
    optimizers are torch's SGD, Adam and AdamW)."""
    return _a_registered_value(name) and optimizer_of(name).optimizer.matrices


def several_optimizers(name: str) -> bool:
    """Whether the optimizer word's optimizer is several torch optimizers (Optimizer.optimizers: a
    rule's predicate, a state-dict API or a strategy that takes one optimizer refuses it; a
    generated schedule's is one)."""
    return _a_registered_value(name) and optimizer_of(name).optimizer.optimizers > 1


def _a_registered_value(name: str) -> bool:
    """Whether the word names a registered optimizer: not a generated schedule, nor a property's
    cell before its examples draw one (its word "generated"); theirs are SGD, Adam or AdamW."""
    return not is_generated_optimizer(name) and optimizer_axes(name)["base_optimizer"] in AXIS.values


def covered_late(name: str) -> bool:
    """Whether the cells of the optimizer word's optimizer join a covering after the others are
    chosen (Optimizer.covered_late; a generated schedule's never do)."""
    return not is_generated_optimizer(name) and optimizer_of(name).optimizer.covered_late

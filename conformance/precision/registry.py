"""The precisions, registered in one place: the matrix's slices, the rules and the wrappers read
this table. From outside the package, `register(precision)` in a module that pytest imports
(`-p your.module`); the ranks import that module too (plugin_modules)."""

from __future__ import annotations

from conformance.axis import Axis
from conformance.case import DEFAULT_PRECISION
from conformance.precision import builtin
from conformance.precision.base import Precision

AXIS: Axis[Precision] = Axis("precision", builtin.PRECISIONS)
PRECISIONS = AXIS.values
register = AXIS.register  # adds a precision (or replaces the one of its name); returns it
plugin_modules = AXIS.plugin_modules


def precision_of(name: str) -> Precision:
    return AXIS.of(name)


def mixed(name: str) -> bool:
    """Whether the precision named casts anything (a rule's predicate: DDP has no such setting)."""
    return precision_of(name).mixed


def is_default(name: str) -> bool:
    """Whether it is the default precision (fp32), which cell ids leave out."""
    return name == DEFAULT_PRECISION


def mixed_precisions() -> tuple[str, ...]:
    """Every registered precision a wrapper casts for over fp32 parameters, sorted (a checkpoint
    of it must hold the fp32 weights: the hygiene check's values)."""
    return tuple(sorted(n for n, p in PRECISIONS.items() if p.mixed and p.keeps_fp32))


def other_precisions() -> tuple[str, ...]:
    """Every registered precision but the default, sorted: the precision slices' values."""
    return tuple(sorted(n for n in PRECISIONS if not is_default(n)))


def scales_loss(name: str) -> bool:
    """Whether the precision named scales the loss (a GradScaler: a rule's predicate)."""
    return precision_of(name).loss_scale is not None


def unavailable(name: str) -> str | None:
    """Why this torch cannot run the precision named (the runner's skip), or None."""
    return precision_of(name).unavailable()


def sets_grad_dtype(name: str) -> bool:
    """Whether the precision named sets the gradients' dtype (a rule's predicate)."""
    return precision_of(name).grads is not None


def grad_precisions() -> tuple[str, ...]:
    """Every registered precision that sets the gradients' dtype, sorted (their slice's values)."""
    return tuple(sorted(n for n in PRECISIONS if sets_grad_dtype(n)))

"""The precisions, registered in one place: the matrix's slices, the rules and the wrappers read
this table. From outside the package, `register(precision)` in a module that pytest imports
(`-p your.module`); the ranks import that module too (plugin_modules)."""

from __future__ import annotations

import sys

from conformance.case import DEFAULT_PRECISION
from conformance.precision import builtin
from conformance.precision.base import Precision

PRECISIONS: dict[str, Precision] = {precision.name: precision for precision in builtin.PRECISIONS}
_MODULES: dict[str, str] = {}  # name -> the module outside the package that registered it


def register(precision: Precision) -> Precision:
    """Adds a precision (or replaces the one of its name); returns it."""
    PRECISIONS[precision.name] = precision
    _MODULES[precision.name] = sys._getframe(1).f_globals.get("__name__", "")
    return precision


def precision_of(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown precision {name!r}; known: {sorted(PRECISIONS)} (a plugin's precision: register "
            "it in a module pytest imports, -p your.module)"
        ) from None


def mixed(name: str) -> bool:
    """Whether the precision named casts anything (a rule's predicate: DDP has no such setting)."""
    return precision_of(name).mixed


def is_default(name: str) -> bool:
    """Whether it is the default precision (fp32), which cell ids leave out."""
    return name == DEFAULT_PRECISION


def mixed_precisions() -> tuple[str, ...]:
    """Every registered precision that casts, sorted: the mixed-precision slice's values."""
    return tuple(sorted(n for n, p in PRECISIONS.items() if p.mixed))


def plugin_modules() -> tuple[str, ...]:
    """The modules outside this package that registered a precision: each rank imports them."""
    return tuple(sorted({m for m in _MODULES.values() if m and not m.startswith("conformance.")}))

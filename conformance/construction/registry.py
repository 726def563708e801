"""The constructions, registered in one place: the matrix's slices and the fresh model of every
cell read this table. From outside the package, `register(construction)` in a module that pytest
imports (`-p your.module`); the ranks import that module too (plugin_modules)."""

from __future__ import annotations

from conformance.axis import Axis
from conformance.case import DEFAULT_CONSTRUCTION
from conformance.construction import builtin
from conformance.construction.base import Construction

AXIS: Axis[Construction] = Axis("construction", builtin.CONSTRUCTIONS)
CONSTRUCTIONS = AXIS.values
register = AXIS.register  # adds a construction (or replaces the one of its name); returns it
plugin_modules = AXIS.plugin_modules


def construction_of(name: str) -> Construction:
    return AXIS.of(name)


def is_default(name: str) -> bool:
    """Whether it is the default construction (the constructor), which cell ids leave out."""
    return name == DEFAULT_CONSTRUCTION


def on_meta(name: str) -> bool:
    """Whether the construction named builds the fresh model on the meta device on every rank (a
    rule's predicate; a rank-0 init is not: rank0_init)."""
    construction = construction_of(name)
    return construction.on_meta and not construction.rank0_builds


def rank0_init(name: str) -> bool:
    """Whether the construction named builds by the constructor on rank 0 only (a rule's predicate)."""
    return construction_of(name).rank0_builds


def skips_initialisation(name: str) -> bool:
    """Whether the construction named leaves the model's own initialisation out after to_empty() (a
    pitfall on purpose, with columns of its own; a rule's predicate: a wrapper that materialises a
    meta-device module itself cannot skip it)."""
    construction = construction_of(name)
    return construction.on_meta and not construction.initialise


def meta_constructions() -> tuple[str, ...]:
    """Every registered construction on the meta device on every rank, sorted (the meta slices' values)."""
    return tuple(sorted(n for n in CONSTRUCTIONS if on_meta(n)))


def rank0_constructions() -> tuple[str, ...]:
    """Every registered rank-0 init, sorted (the rank-0 slices' values)."""
    return tuple(sorted(n for n in CONSTRUCTIONS if rank0_init(n)))

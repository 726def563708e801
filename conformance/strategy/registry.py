"""Registered strategies: yours, a framework's, next to the built-in matrix.

A `RegisteredStrategy` names a factory `Case -> Strategy` (the protocol in `protocol.py`)
and declares what it supports. The matrix gives it the cells of the profile's round-trip,
resume and reshard checks, over every wrapper the profile has, for the full and sharded
state-dict kinds; every cell outside what it declares is an explicit `unsupported` with the
reason, and when a package it requires is missing its cells are skips that name it.

Register one with `pytest cases --strategy package.module:ATTR` (repeatable; then only the
strategies named run: `--strategy builtin` names the built-in ones), or for everyone who
installs your package with an entry point in the `conformance.strategies` group, which runs
with the built-in matrix by default:

    [project.entry-points."conformance.strategies"]
    my_trainer = "my_trainer.checkpoint_conformance:STRATEGY"
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.metadata
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from conformance.case import Case, Transfer
from conformance.optim.registry import several_optimizers
from conformance.strategy.storage import STORAGES, Storage
from conformance.strategy.storage.own import OwnFormat

if TYPE_CHECKING:
    from conformance.strategy.protocol import Strategy

ENTRY_POINT_GROUP = "conformance.strategies"
STRATEGY_KINDS = ("full", "sharded")  # the state-dict kinds it is asked for, one cell each
# The matrix's data-parallel configuration, whose cells a strategy's own layouts take.
DATA_PARALLEL = ("ddp", "replicate")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


ONE_OPTIMIZER_STRATEGY = (
    "the strategy protocol gives a registered strategy one torch optimizer (TrainState.optim), which "
    "its framework saves or rebuilds (own_training); several optimizers run with the built-in "
    "strategies only"
)


@dataclass(frozen=True)
class Supports:
    """What a strategy can do; the cells of everything else are `unsupported`.

    wrappers: (wrapper, sharding) pairs as the matrix spells them, e.g. ("fsdp1", "full_shard"),
    ("fsdp1+orig", "shard_grad_op"), ("fsdp2", "shard"), ("ddp", "replicate").
    kinds: the state-dict kinds it saves ("full", "sharded"). checks: of those offered to
    registered strategies (conformance.matrix.registered_checks(); a run names them on bad
    input); "reshard" means it loads a checkpoint in another world size. world_sizes,
    optimizers, models, precisions: None for every one the matrix has. layouts: (wrapper,
    sharding) pairs the strategy brings itself, where its framework's engine does the wrapping
    (("deepspeed", "zero3")): each takes the cells the matrix gives its data-parallel
    configuration (DDP's, DATA_PARALLEL), in every check the strategy declares, and counts as
    a declared wrapper. variants: (check, the variants of its cells the strategy takes), e.g.
    ("lifecycle", ("keep_latest", "interrupted")): the lifecycle check's scenarios; a check not
    named: every variant."""

    wrappers: tuple[tuple[str, str], ...]
    kinds: tuple[str, ...] = STRATEGY_KINDS
    checks: tuple[str, ...] = ("resume", "roundtrip")
    world_sizes: tuple[int, ...] | None = None
    optimizers: tuple[str, ...] | None = None
    models: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = ("fp32",)
    layouts: tuple[tuple[str, str], ...] = ()
    variants: tuple[tuple[str, tuple[str, ...]], ...] = ()


@functools.cache
def installed_version(dist: str) -> str | None:
    """A distribution's version, None when it is not installed; looked up once per process
    (every cell of a strategy asks)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class RegisteredStrategy:
    """name: a word of every cell id ([a-z][a-z0-9_]*). factory: module-level (the ranks import
    it by name), called on every rank with the cell's Case. storage: how it writes, a word of
    its cell ids: a Storage object (a built-in one of conformance.strategy.storage, or your
    own), or a name: a built-in storage's picks that one, any other word is its own format
    (OwnFormat: the checks then damage and inspect only what any files allow). requires:
    distribution names it needs; when one is missing, every cell of the strategy is a skip
    naming it. skips_on: (cell, backend) -> why that cell cannot run with that backend, or None
    (a framework that runs its code under test only on GPUs skips its cells on gloo, saying
    why, instead of failing them). imports: the framework's modules its cells import, which a
    run's worlds import before their first cell."""

    name: str
    factory: Callable[[Case], Strategy]
    supports: Supports
    storage: Storage | str = "native"
    requires: tuple[str, ...] = ()
    description: str = ""
    skips_on: Callable[[Case | Transfer, str], str | None] | None = None
    # the framework's modules its cells import (seconds each): the worlds of a run that has its
    # cells import them once, before forking their ranks, instead of on each world's first cell
    # and again after every crash (best effort: one that does not import is the cells' to say)
    imports: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name == "builtin":
            raise ValueError(
                f"strategy name {self.name!r}: a lowercase word ([a-z][a-z0-9_]*), not 'builtin'"
            )
        if isinstance(self.storage, str):
            if not _NAME.match(self.storage):
                raise ValueError(f"storage label {self.storage!r}: a lowercase word")
            picked = STORAGES.get(self.storage) or OwnFormat(self.storage)
            object.__setattr__(self, "storage", picked)
        elif not _NAME.match(getattr(self.storage, "name", "")):
            raise ValueError(f"{self.name}: its storage object's name must be a lowercase word")

    def versions(self) -> dict[str, str | None]:
        """The installed version of each required distribution (None: not installed)."""
        return {dist: installed_version(dist) for dist in self.requires}

    def skip_reason(self, cell: Case | Transfer | None = None, backend: str = "") -> str | None:
        """Why a cell of it cannot run here: a framework it needs is missing, or (skips_on) the
        cell cannot run with this backend."""
        missing = [d for d, v in self.versions().items() if v is None]
        if missing:
            return f"{self.name} needs {', '.join(missing)} (pip install {' '.join(missing)})"
        if self.skips_on is not None and cell is not None:
            return self.skips_on(cell, backend)
        return None

    def unsupported_reason(self, cell: Case | Transfer) -> str | None:
        """Why the strategy does not take this cell, by its own declaration, or None. A transfer:
        each of its sides must be declared (the side of a built-in configuration, in an interop
        cell, is the matrix's)."""
        if isinstance(cell, Transfer):
            sides = [case for case in (cell.save, cell.load) if case.strategy == self.name]
            return next((r for r in (self._undeclared(case, cell.check) for case in sides) if r), None)
        return self._undeclared(cell, cell.check)

    def _undeclared(self, case: Case, check: str) -> str | None:
        s = self.supports
        declared: list[tuple[bool, str]] = [
            (check in s.checks, f"the {check} check"),
            ((case.wrapper, case.sharding) in s.wrappers + s.layouts, f"{case.wrapper} {case.sharding}"),
            (case.kind in s.kinds, f"{case.kind} state dicts"),
            (s.world_sizes is None or case.world_size in s.world_sizes, f"{case.world_size} ranks"),
            (s.optimizers is None or case.optimizer in s.optimizers, f"optimizer {case.optimizer}"),
            (s.models is None or case.model in s.models, f"model {case.model}"),
            (s.precisions is None or case.precision in s.precisions, f"precision {case.precision}"),
            (
                case.variant in dict(s.variants).get(check, (case.variant,)),
                f"the {check} check's {case.variant}",
            ),
        ]
        undeclared = next((f"{self.name} does not declare {what}" for ok, what in declared if not ok), None)
        if undeclared is None and several_optimizers(case.optimizer):
            return ONE_OPTIMIZER_STRATEGY
        return undeclared


def own_layouts(strategy: RegisteredStrategy, case: Case, declaration: str = "") -> list[Case]:
    """The case, and when it is the data-parallel configuration, the same cell in each layout
    the strategy brings itself (Supports.layouts) that takes the cells of the matrix declaration
    (a registered Layout's `declarations`; "": every layout)."""
    from conformance.layout.registry import layout_of

    if (case.wrapper, case.sharding) != DATA_PARALLEL:
        return [case]
    layouts = [dataclasses.replace(case, wrapper=w, sharding=s) for w, s in strategy.supports.layouts]
    taken = [c for c in layouts if _takes(layout_of(c).declarations, declaration)]
    return [case, *taken]


def _takes(declarations: tuple[str, ...] | None, declaration: str) -> bool:
    return declarations is None or not declaration or declaration in declarations


@dataclass
class Registry:
    """The strategies of a run: the built-in matrix (unless left out) and registered ones."""

    builtin: bool = True
    strategies: dict[str, RegisteredStrategy] = field(default_factory=dict)

    def add(self, strategy: RegisteredStrategy, source: str) -> None:
        if not isinstance(strategy, RegisteredStrategy):
            raise TypeError(f"{source} is a {type(strategy).__name__}, not a RegisteredStrategy")
        if strategy.name in self.strategies:
            raise ValueError(f"two strategies are named {strategy.name!r} ({source} is the second)")
        self.strategies[strategy.name] = strategy

    def get(self, name: str) -> RegisteredStrategy:
        try:
            return self.strategies[name]
        except KeyError:
            raise KeyError(
                f"no registered strategy {name!r}; registered: {sorted(self.strategies)}"
            ) from None

    def strategy_of(self, cell: Case | Transfer) -> RegisteredStrategy | None:
        """The registered strategy a cell belongs to; None for a built-in cell."""
        return self.get(cell.strategy) if cell.strategy else None

    def imports_of(self, cells: Iterable[Case | Transfer]) -> tuple[str, ...]:
        """The framework modules (RegisteredStrategy.imports) of the strategies these cells
        belong to whose frameworks are installed, each once, in order."""
        names = sorted({c.strategy for c in cells if c.strategy})
        strategies = [self.strategies[n] for n in names if n in self.strategies]
        strategies = [s for s in strategies if s.skip_reason() is None]
        return tuple(dict.fromkeys(m for s in strategies for m in s.imports))

    def versions(self) -> dict[str, dict[str, str | None]]:
        """name -> the versions of what it requires: the run metadata's frameworks."""
        return {name: s.versions() for name, s in sorted(self.strategies.items())}

    def descriptions(self) -> dict[str, str]:
        """name -> what it runs and how (the reports say it beside its rows)."""
        return {name: s.description for name, s in sorted(self.strategies.items()) if s.description}


def entry_point_strategies() -> dict[str, str]:
    """Entry-point name -> its value (module:attr), for the `conformance.strategies` group."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def load_strategy(spec: str) -> RegisteredStrategy:
    """`package.module:ATTR` (a file of the working directory counts as a module), or the
    name of an entry point of the `conformance.strategies` group."""
    points = entry_point_strategies()
    target = points.get(spec, spec)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"--strategy {spec!r}: give package.module:ATTR or an installed entry point's name "
            f"(installed: {sorted(points) or 'none'})"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # as `python -m` does; the ranks get this path too
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--strategy {spec!r}: cannot import {module_name}: {exc}") from None
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"--strategy {spec!r}: {module_name} has no attribute {attr!r}") from None
    if not isinstance(value, RegisteredStrategy):
        raise ValueError(f"--strategy {spec!r} is a {type(value).__name__}, not a RegisteredStrategy")
    return value


def build_registry(names: list[str]) -> Registry:
    """No names: the built-in matrix and every entry point. Names: only those ("builtin" for
    the built-in matrix)."""
    if not names:
        registry = Registry(builtin=True)
        for name in sorted(entry_point_strategies()):
            registry.add(load_strategy(name), f"entry point {name}")
        return registry
    registry = Registry(builtin="builtin" in names)
    for name in sorted(set(names) - {"builtin"}):
        registry.add(load_strategy(name), f"--strategy {name}")
    return registry


def add_strategy_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """`--strategy`, repeatable, for the command-line tools (repro, launch), as pytest has it."""
    parser.add_argument("--strategy", action="append", default=[], help=help_text)

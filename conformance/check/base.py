"""What a check is: an object that carries its meaning, registered in conformance.check.registry.

A `Check` has a name (the `check` axis and a word of its cell ids), a title and feature columns
for the reports, the shape of its cells per profile (`CaseCells`: one configuration each;
`ReshardCells`: saved in N ranks, loaded in M; `GridCells`: every configuration of a grid
loading every other's checkpoint), the executor that runs a cell in the worlds of a pool, and
whether registered strategies and the hypothesis properties get it. Nothing else lists the
checks: the matrix, the runner, the pytest parametrisation and the reports read the registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from conformance.case import Case, Transfer
from conformance.check.phases import Phases
from conformance.check.slices import PairParts, Parts, configurations
from conformance.layout.builtin import builtin_strategy
from conformance.outcome import Outcome
from conformance.strategy.protocol import Strategy
from conformance.strategy.registry import STRATEGY_KINDS, RegisteredStrategy, own_layouts
from conformance.strategy.storage import STORAGES, Storage

Cell = Case | Transfer
StrategyFactory = Callable[[Case], Strategy]


@dataclass(frozen=True)
class Under:
    """What a cell runs with. factory: the strategy under test (a registered strategy's, or the
    built-in one). storage: the storage object of what it writes (its damage, where its files
    are). refusal: why the load of a transfer must raise by design, or None."""

    factory: StrategyFactory
    storage: Storage | None = None
    refusal: str | None = None

    def factory_of(self, cell: Transfer, case: Case) -> StrategyFactory:
        """The factory of one side of a transfer: a transfer between a registered strategy and a
        built-in configuration runs each side with its own."""
        if cell.save.strategy == cell.load.strategy:
            return self.factory
        return self.factory if case.strategy else builtin_strategy


# (phases, cell, what it runs with) -> (outcome, detail)
Executor = Callable[[Phases, Any, Under], tuple[Outcome, str]]


def _any(axes: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Feature:
    """A column of the feature table: which of its check's cells say whether a strategy has the
    feature. by_loader: the cell counts for the configuration that loaded (interop in), not the
    one that saved."""

    name: str
    meaning: str
    selects: Callable[[Mapping[str, Any]], bool] = _any
    by_loader: bool = False


def _sorted(cells: set[Any]) -> list[Any]:
    return sorted(cells, key=lambda c: c.id)


def mine(strategy: RegisteredStrategy, case: Case, kind: str) -> Case:
    """A built-in cell as a registered strategy's: its name, its storage, the kind asked for."""
    return dataclasses.replace(
        case, api=kind, storage=strategy.storage.name, strategy=strategy.name, variant=""
    )


class CellShape(Protocol):
    def cells(self, check: str, profile: str) -> list[Any]: ...

    def strategy_cells(self, check: str, profile: str, strategy: RegisteredStrategy) -> list[Any]: ...


def no_variants(storage: Storage) -> tuple[str, ...]:
    return ("",)


@dataclass(frozen=True)
class CaseCells:
    """One configuration per cell: profile name -> its slices, each at some world sizes.
    variants: what the check varies per storage (the damage of a corrupt cell), a cell each.
    kinds: the state-dict kinds a registered strategy is asked for. builtin: the built-in matrix
    has the cells too (False: the slices say only what a registered strategy's cells are)."""

    parts: Mapping[str, Parts]
    variants: Callable[[Storage], tuple[str, ...]] = no_variants
    kinds: tuple[str, ...] = STRATEGY_KINDS
    builtin: bool = True

    def _configurations(self, check: str, profile: str) -> list[Case]:
        parts = self.parts.get(profile, ())
        return _sorted({case for slice_, sizes in parts for case in slice_.product(sizes, check)})

    def cells(self, check: str, profile: str) -> list[Case]:
        if not self.builtin:
            return []
        return _sorted(
            {
                dataclasses.replace(case, variant=variant)
                for case in self._configurations(check, profile)
                for variant in self.variants(STORAGES[case.storage])
            }
        )

    def strategy_cells(self, check: str, profile: str, strategy: RegisteredStrategy) -> list[Case]:
        variants = self.variants(strategy.storage)
        # the built-in configurations as the strategy's, each once: those that differ only in the
        # API, storage or variant, which the strategy's own replace, are one (a large declaration
        # has tens of thousands of them per strategy, and few distinct ones)
        if not self.kinds:
            return []
        own = {mine(strategy, c, self.kinds[0]) for c in configurations(self.parts.get(profile, ()), check)}
        return _sorted(
            {
                dataclasses.replace(c, api=k, variant=v)
                for configuration in own
                for c in own_layouts(strategy, configuration, profile)
                for k in self.kinds
                for v in variants
            }
        )


# A registered strategy reshards between every pair of the world sizes the matrix has, unless a
# profile names its own pairs (ReshardCells.strategy_pairs).
EVERY_PAIR: tuple[tuple[int, int], ...] = tuple((n, m) for n in (1, 2, 4) for m in (1, 2, 4) if n != m)


@dataclass(frozen=True)
class ReshardCells:
    """Saved in a world of N ranks, loaded in a separate world of M: profile -> slices and pairs.
    A registered strategy gets the pairs `strategy_pairs` names for the profile, EVERY_PAIR in a
    profile it does not name."""

    parts: Mapping[str, PairParts]
    strategy_pairs: Mapping[str, tuple[tuple[int, int], ...]] = dataclasses.field(default_factory=dict)
    # slices whose cells a registered strategy gets only where it declares their model (a model
    # few declare: the others' rows would be all unsupported)
    declared_parts: Mapping[str, PairParts] = dataclasses.field(default_factory=dict)

    def _pairs(self, profile: str, parts: Mapping[str, PairParts] | None = None) -> set[tuple[Case, int]]:
        return {
            (dataclasses.replace(case, world_size=n), m)
            for slice_, pairs in (self.parts if parts is None else parts).get(profile, ())
            for case in slice_.cases((1,))
            for n, m in pairs
        }

    def cells(self, check: str, profile: str) -> list[Transfer]:
        return _sorted(
            {
                Transfer(check, save, dataclasses.replace(save, world_size=m))
                for save, m in self._pairs(profile) | self._pairs(profile, self.declared_parts)
            }
        )

    def strategy_cells(self, check: str, profile: str, strategy: RegisteredStrategy) -> list[Transfer]:
        models = strategy.supports.models
        declared = {
            (s, m) for s, m in self._pairs(profile, self.declared_parts) if models and s.model in models
        }
        configurations = {
            own
            for save, _ in self._pairs(profile) | declared
            for own in own_layouts(strategy, dataclasses.replace(save, world_size=1), profile)
        }
        out: set[Transfer] = set()
        for case in configurations:
            for kind in STRATEGY_KINDS:
                ours = mine(strategy, case, kind)
                for n, m in self.strategy_pairs.get(profile, EVERY_PAIR):
                    save = dataclasses.replace(ours, world_size=n)
                    out.add(Transfer(check, save, dataclasses.replace(save, world_size=m)))
        return _sorted(out)


@dataclass(frozen=True)
class GridCells:
    """Every configuration of the grid loads every configuration's checkpoint (itself included),
    at the profile's world sizes. configs: (wrapper, sharding, api, storage)."""

    configs: tuple[tuple[str, str, str, str], ...]
    sizes: Mapping[str, tuple[int, ...]]

    def _grid(self, world_size: int) -> list[Case]:
        return [Case(w, s, a, st, "adamw", "mlp", world_size) for w, s, a, st in self.configs]

    def cells(self, check: str, profile: str) -> list[Transfer]:
        out: set[Transfer] = set()
        for ws in self.sizes.get(profile, ()):
            grid = self._grid(ws)
            out.update(Transfer(check, save, load) for save in grid for load in grid)
        return _sorted(out)

    def strategy_cells(self, check: str, profile: str, strategy: RegisteredStrategy) -> list[Transfer]:
        """Where the formats meet: the strategy in each grid configuration of its storage (that
        wrapper, that configuration's state-dict kind) saves for every grid configuration of the
        same storage and kind, and loads what each of them saved."""
        out: set[Transfer] = set()
        for ws in self.sizes.get(profile, ()):
            grid = self._grid(ws)
            for config in grid:
                if config.storage != strategy.storage.name:
                    continue
                ours = mine(strategy, config, config.kind)
                for other in grid:
                    if other.storage == config.storage and other.kind == config.kind:
                        out.update((Transfer(check, ours, other), Transfer(check, other, ours)))
        return _sorted(out)


@dataclass(frozen=True)
class Check:
    """name: the check axis. title: its section in the reports. features: its columns of the
    feature table. shape: its cells per profile. execute: runs one cell. registered: registered
    strategies get its cells (each declares in Supports.checks which it takes). properties:
    the hypothesis properties (cases/test_property.py) run it over generated configurations.
    own_templates: its cells shape the template a load goes into (conformance.check.template).
    needs: the strategy's methods beyond the protocol's three its cells call (an extension such
    as conformance.strategy.lifecycle); a strategy without them gets `unsupported`."""

    name: str
    title: str
    shape: CellShape
    execute: Executor
    features: tuple[Feature, ...] = ()
    registered: bool = False
    properties: bool = False
    # its cells load into templates they shape themselves, the pitfalls included (the template
    # check): the matrix's rules about what a template cannot hold do not apply to them
    own_templates: bool = False
    needs: tuple[str, ...] = ()

    def lacks(self, strategy: object) -> list[str]:
        """The methods of `needs` the strategy does not have."""
        return [n for n in self.needs if not callable(getattr(strategy, n, None))]

    @property
    def fixture(self) -> str:
        """The pytest fixture of its cells in cases/ (one test per cell of the profile)."""
        return f"{self.name}_case"

    def cells(self, profile: str) -> list[Any]:
        """Its built-in cells in a profile, sorted by id (the same in every run and worker)."""
        return self.shape.cells(self.name, profile)

    def strategy_cells(self, profile: str, strategy: RegisteredStrategy) -> list[Any]:
        """A registered strategy's cells: the profile's wrappers, optimizers, models, precisions
        and world sizes of the check, for each kind its shape asks for, in the strategy's name
        and storage. Whether it takes each is its own declaration (Supports)."""
        return self.shape.strategy_cells(self.name, profile, strategy) if self.registered else []

"""Covering profiles: the cells of a check chosen from its full product so that every pair of
values of any two axes that some supported cell combines appears in a chosen cell, and every
triple of (layout, state-dict API, storage); the cost grows with the sum of the axes, not their
product. The choice is a weighted set cover (code of ours: the covering-array libraries compared
in bench/covering/ know no cost, and an unweighted covering ran slower than the product it
replaced, bench/README.md): presets first (one cell per feature-table answer and finding witness
of the profile's declaration), then greedily the cell that covers the most pairs per measured
second (conformance.matrix.costs), then whatever became redundant is dropped. Deterministic: the
same cells in every run, worker and machine, until costs.json or the matrix changes."""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Iterable, Mapping

from conformance.case import Case, optimizer_axes
from conformance.matrix.costs import Costs, load_costs

TRIPLE = ("layout", "api", "storage")
# The case fields a covering varies; wrapper and sharding together are one axis, the layout (its
# mesh is an axis of its own: the (layout, API, storage) triple may be met on any mesh of the
# layout, the cheapest world included, and each (layout, mesh) pair is met too). The optimizer
# word is four axes (conformance.case.optimizer_axes): the optimizer, its implementation, its
# parameter groups and its scheduler, so that their combinations are met like any other pair.
OPTIMIZER_AXES = ("base_optimizer", "optimizer_impl", "param_groups", "scheduler")
FIELDS = ("mesh", "api", "storage", *OPTIMIZER_AXES, "model", "precision", "world_size", "variant")

Row = dict[str, str]


def row_of(case: Case) -> Row:
    """The covering's axes of a cell, as strings."""
    return row_of_axes(case.axes())


def row_of_axes(axes: Mapping[str, object]) -> Row:
    """The covering's axes of a cell's axes (Case.axes, a result's `axes`), as strings."""
    row = {"layout": f"{axes['wrapper']}|{axes['sharding']}"}
    split = optimizer_axes(str(axes["optimizer"]))  # a table published before the split has the word
    row.update({f: str(split[f] if f in split else axes.get(f, "")) for f in FIELDS})
    return row


def _key(row: Row, axes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(row[a] for a in axes)


def items(row: Row, axes: tuple[str, ...], strength: int = 2) -> set[tuple[str, ...]]:
    """What a row covers: each pair of its axes' values (strength 1: each value), and its
    (layout, API, storage)."""
    out = {
        tuple(itertools.chain.from_iterable((a, row[a]) for a in combo))
        for combo in itertools.combinations(axes, strength)
    }
    met = tuple(a for a in TRIPLE if a in axes)  # a registered strategy has one storage
    if len(met) > strength:
        out.add(("triple", *_key(row, met)))
    return out


def varying(rows: Iterable[Row]) -> tuple[str, ...]:
    """The axes with more than one value among the rows (the others are covered by any row)."""
    rows = list(rows)
    return tuple(a for a in ("layout", *FIELDS) if len({r[a] for r in rows}) > 1)


def lost(universe: Iterable[Case], chosen: Iterable[Case], strength: int = 2) -> set[tuple[str, ...]]:
    """The pairs and triples some cell of the universe covers and no chosen cell does."""
    rows = [row_of(c) for c in universe]
    axes = varying(rows)
    need = set().union(*(items(r, axes, strength) for r in rows)) if rows else set()
    got = set().union(*(items(row_of(c), axes, strength) for c in chosen)) if rows else set()
    return need - got


def _coded_items(rows: list[Row], axes: tuple[str, ...], strength: int) -> list[set[int]]:
    """items() of each row, each item coded as one int (the same sets up to a one-to-one renaming,
    so the same choice): each (axis, value) is numbered, a pair (strength 2) is its two numbers as
    digits in that base, and a row's (layout, API, storage) is numbered above every pair's code."""
    code: dict[tuple[str, str], int] = {}
    numbered = [[code.setdefault((a, row[a]), len(code)) for a in axes] for row in rows]
    base = len(code) + 1
    met = [axes.index(a) for a in TRIPLE if a in axes]  # a registered strategy has one storage
    triples: dict[tuple[int, ...], int] = {}
    out = []
    combos = list(itertools.combinations(range(len(axes)), strength))
    for number in numbered:
        if strength == 2:  # most of the time: spelled out
            coded = {number[i] * base + number[j] for i, j in combos}
        else:
            coded = {functools.reduce(lambda total, i: total * base + number[i], c, 0) for c in combos}
        if len(met) > strength:
            triple = tuple(number[i] for i in met)
            coded.add(base**strength + triples.setdefault(triple, len(triples)))
        out.append(coded)
    return out


def weighted(
    rows: list[Row], axes: tuple[str, ...], forced: list[int], cost: list[float], strength: int = 2
) -> list[int]:
    """The rows chosen (indices, sorted): the forced ones, then greedily the row that covers the
    most not yet covered pairs and triples per second (lazy greedy set cover, ties broken by the
    row's values: deterministic), then every unforced row whose items all other chosen rows
    cover is dropped, the costliest first. Within a factor ln(items) of the cheapest cover."""
    sets = _coded_items(rows, axes, strength)
    keys = [_key(r, axes) for r in rows]
    chosen = set(forced)
    covered: set[tuple[str, ...]] = set().union(*(sets[i] for i in chosen)) if chosen else set()
    need = set().union(*sets) if sets else set()
    heap = [(-len(sets[i] - covered) / cost[i], keys[i], i) for i in range(len(rows)) if i not in chosen]
    heapq.heapify(heap)
    while covered != need and heap:
        _, key, i = heapq.heappop(heap)
        gain = len(sets[i] - covered) / cost[i]
        if gain <= 0:
            continue
        if heap and (-gain, key) > heap[0][:2]:
            heapq.heappush(heap, (-gain, key, i))  # stale: others now cover more per second
            continue
        chosen.add(i)
        covered |= sets[i]
    count: dict[tuple[str, ...], int] = {}
    for i in chosen:
        for item in sets[i]:
            count[item] = count.get(item, 0) + 1
    for i in sorted(chosen - set(forced), key=lambda j: (-cost[j], keys[j])):
        if all(count[item] > 1 for item in sets[i]):
            chosen.discard(i)
            for item in sets[i]:
                count[item] -= 1
    return sorted(chosen)


def cover(
    universe: list[Case], presets: Iterable[Case] = (), costs: Costs | None = None, strength: int = 2
) -> list[Case]:
    """The covering of the universe (supported cells of one check), presets included, sorted by
    id: every pair and triple some cell of the universe covers, at the least measured cost
    (conformance.matrix.costs) the greedy finds. The same cells on every run and machine."""
    if not universe:
        return []
    costs = costs or load_costs()
    universe = sorted(set(universe), key=lambda c: c.id)
    rows = [row_of(c) for c in universe]
    axes = varying(rows)
    index = {c: i for i, c in enumerate(universe)}
    forced = sorted({index[c] for c in presets if c in index})
    chosen = weighted(rows, axes, forced, [costs.of(c) for c in universe], strength)
    return [universe[i] for i in chosen]


def cover_each_construction(
    universe: list[Case], presets: list[Case], costs: Costs | None = None, strength: int = 2
) -> list[Case]:
    """cover() for each construction of the fresh model on its own (conformance.construction): the
    constructor's cells are chosen as if no other construction existed, and another's meet their
    pairs among themselves (the cost grows with the sum of the axes; a meta-device cell never
    stands in for a constructor's). Sorted by id."""
    chosen: list[Case] = []
    for construction in sorted({c.construction for c in universe}):
        pool = [c for c in universe if c.construction == construction]
        chosen += cover(pool, [c for c in presets if c.construction == construction], costs, strength)
    return sorted(chosen, key=lambda c: c.id)

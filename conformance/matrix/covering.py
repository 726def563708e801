"""Covering profiles: the cells of a check chosen from its full product so that every pair of
values of any two axes that some supported cell combines appears in a chosen cell, and every
triple of (layout, state-dict API, storage); the cost grows with the sum of the axes, not their
product. covertable (a well-kept covering-array library; bench/covering/ compares it with PICT and
allpairspy) picks the rows, constrained to the supported cells of the check's `full` profile;
`presets` forces in one cell per (feature-table row, feature) that the `default` profile covers,
so that no answer of the "what works" table is lost. The salt fixes the choice: the same cells
in every run, worker and machine. Cells of transfers (reshard, relayout, interop) are not
covered yet: a covering profile takes the `default` ones."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from conformance.case import Case

SALT = "conformance-1"
TRIPLE = ("layout", "api", "storage")
# The case fields a covering varies; wrapper and sharding together are one axis, the layout (its
# mesh is an axis of its own: the (layout, API, storage) triple may be met on any mesh of the
# layout, the cheapest world included, and each (layout, mesh) pair is met too).
FIELDS = ("mesh", "api", "storage", "optimizer", "model", "precision", "world_size", "variant")

Row = dict[str, str]


def row_of(case: Case) -> Row:
    """The covering's axes of a cell, as strings."""
    row = {"layout": f"{case.wrapper}|{case.sharding}"}
    row.update({f: str(getattr(case, f)) for f in FIELDS})
    return row


def _key(row: Row, axes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(row[a] for a in axes)


def items(row: Row, axes: tuple[str, ...]) -> set[tuple[str, ...]]:
    """What a row covers: each pair of its axes' values, and its (layout, API, storage)."""
    out = {(a, row[a], b, row[b]) for a, b in itertools.combinations(axes, 2)}
    if set(TRIPLE) <= set(axes):
        out.add(("triple", *_key(row, TRIPLE)))
    return out


def varying(rows: Iterable[Row]) -> tuple[str, ...]:
    """The axes with more than one value among the rows (the others are covered by any row)."""
    rows = list(rows)
    return tuple(a for a in ("layout", *FIELDS) if len({r[a] for r in rows}) > 1)


def lost(universe: Iterable[Case], chosen: Iterable[Case]) -> set[tuple[str, ...]]:
    """The pairs and triples some cell of the universe covers and no chosen cell does."""
    rows = [row_of(c) for c in universe]
    axes = varying(rows)
    need = set().union(*(items(r, axes) for r in rows)) if rows else set()
    got = set().union(*(items(row_of(c), axes) for c in chosen)) if rows else set()
    return need - got


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "fsdp-checkpoint-conformance" / "covering"


def _generate(rows: list[Row], axes: tuple[str, ...], presets: list[Row]) -> list[tuple[str, ...]]:
    import covertable

    universe = {_key(r, axes) for r in rows}
    pairs = {
        (a, b): {(r[a], r[b]) for r in rows} for a, b in itertools.combinations(axes, 2)
    }  # a partial row that no supported cell extends is cut early

    def allowed(a: str, b: str) -> Callable[[Row], bool]:
        return lambda row: (row[a], row[b]) in pairs[(a, b)]

    constraints: list[dict[str, Any]] = [
        {"operator": "fn", "requires": [a, b], "evaluate": allowed(a, b)} for a, b in pairs
    ]
    constraints.append(
        {"operator": "fn", "requires": list(axes), "evaluate": lambda r: _key(r, axes) in universe}
    )
    options: dict[str, Any] = {"strength": 2, "constraints": constraints, "salt": SALT}
    if set(TRIPLE) <= set(axes):
        options["sub_models"] = [{"fields": list(TRIPLE), "strength": 3}]
    if presets:
        options["presets"] = [{a: p[a] for a in axes} for p in presets]
    values = {a: sorted({r[a] for r in rows}) for a in axes}
    made = covertable.Controller(values, **options).make()
    return sorted({_key(r, axes) for r in made})  # a preset may come back twice


def cover(universe: list[Case], presets: Iterable[Case] = ()) -> list[Case]:
    """The covering of the universe (supported cells of one check), presets included, sorted by
    id. Cached on disk by the universe, the presets, the salt and covertable's version: a cell
    list is computed once per machine, not in every xdist worker."""
    if not universe:
        return []
    rows = [row_of(c) for c in universe]
    axes = varying(rows)
    by_key = {_key(r, axes): c for r, c in zip(rows, universe)}
    preset_rows = [row_of(c) for c in presets if _key(row_of(c), axes) in by_key]
    keys = _cached(rows, axes, preset_rows)
    return sorted({by_key[tuple(k)] for k in keys}, key=lambda c: c.id)


def _cached(rows: list[Row], axes: tuple[str, ...], presets: list[Row]) -> list[tuple[str, ...]]:
    from importlib.metadata import version

    digest = hashlib.sha256(
        json.dumps(
            [SALT, version("covertable"), axes, sorted(map(sorted, (r.items() for r in rows))), presets]
        ).encode()
    ).hexdigest()[:24]
    path = _cache_dir() / f"{digest}.json"
    try:
        return [tuple(k) for k in json.loads(path.read_text())]
    except (OSError, ValueError):
        pass
    keys = _generate(rows, axes, presets)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(keys))
    tmp.replace(path)  # atomic: xdist workers may write the same file
    return keys

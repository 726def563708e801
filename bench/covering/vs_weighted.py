"""The same covering problem (a check's supported `full` cells, the default declaration's
feature answers and witnesses as presets) solved by covertable 3.2.0 (what `--matrix pairs`
used, unweighted) and by the suite's weighted greedy (conformance.matrix.covering), each
choice priced with the measured costs (conformance/matrix/costs.json).

    pip install covertable==3.2.0   # only for this comparison
    python bench/covering/vs_weighted.py
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import covertable

from conformance.matrix import cells as _cells  # noqa: F401  (the package's face)
from conformance.matrix.cells import _check, feature_presets, witnesses
from conformance.matrix.costs import load_costs
from conformance.matrix.covering import TRIPLE, _key, cover, lost, row_of, varying
from conformance.matrix.rules import unsupported_reason


def by_covertable(universe: list, presets: list) -> list:
    rows = [row_of(c) for c in universe]
    axes = varying(rows)
    keys = {_key(r, axes) for r in rows}
    pairs = {(a, b): {(r[a], r[b]) for r in rows} for a, b in itertools.combinations(axes, 2)}

    def allowed(a: str, b: str) -> Any:
        return lambda row: (row[a], row[b]) in pairs[(a, b)]

    constraints: list[dict[str, Any]] = [
        {"operator": "fn", "requires": [a, b], "evaluate": allowed(a, b)} for a, b in pairs
    ]
    constraints.append(
        {"operator": "fn", "requires": list(axes), "evaluate": lambda r: _key(r, axes) in keys}
    )
    options: dict[str, Any] = {"strength": 2, "constraints": constraints, "salt": "conformance-1"}
    options["sub_models"] = [{"fields": list(TRIPLE), "strength": 3}]
    options["presets"] = [{a: row_of(p)[a] for a in axes} for p in presets]
    made = covertable.Controller({a: sorted({r[a] for r in rows}) for a in axes}, **options).make()
    by_key = {_key(r, axes): c for r, c in zip(rows, universe)}
    return sorted({by_key[_key(r, axes)] for r in made}, key=lambda c: c.id)


def main() -> None:
    costs = load_costs()
    print("| check | cells: covertable / weighted | estimated s: covertable / weighted | time to choose |")
    print("|---|---|---|---|")
    for check in ("roundtrip", "hygiene", "resume", "corrupt"):
        universe = [c for c in _check(check).cells("full") if not unsupported_reason(c)]
        run = [c for c in _check(check).cells("default") if not unsupported_reason(c)]
        presets = feature_presets(check, run) + witnesses(run + universe)
        t0 = time.monotonic()
        a = by_covertable(universe + presets, presets)
        t1 = time.monotonic()
        b = cover(universe + presets, presets)
        t2 = time.monotonic()
        assert not lost(universe, a) and not lost(universe, b)
        cost_a, cost_b = (sum(costs.of(c) for c in cs) for cs in (a, b))
        print(
            f"| {check} | {len(a)} / {len(b)} | {cost_a:.0f} / {cost_b:.0f} | {t1 - t0:.1f} s / {t2 - t1:.1f} s |"
        )


if __name__ == "__main__":
    main()

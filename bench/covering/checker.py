"""Independent coverage checker: brute-force the valid rows of the full product,
derive every *achievable* pair (any two axes) and every achievable
(layout, api, storage) triple, cache them, and check generated rows."""

import itertools
import os
import pickle
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from problem import AXES, NAMES, TRIPLE, valid

CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "valid_sets.pkl")


def build():
    t = time.time()
    n_total = n_valid = 0
    col_pairs = list(itertools.combinations(range(len(NAMES)), 2))
    pairs = {cp: set() for cp in col_pairs}
    tri_idx = tuple(NAMES.index(a) for a in TRIPLE)
    triples = set()
    for vals in itertools.product(*AXES.values()):
        n_total += 1
        if not valid(dict(zip(NAMES, vals))):
            continue
        n_valid += 1
        for i, j in col_pairs:
            pairs[(i, j)].add((vals[i], vals[j]))
        triples.add(tuple(vals[k] for k in tri_idx))
    allpairs = {(NAMES[i], a, NAMES[j], b) for (i, j), s in pairs.items() for a, b in s}
    d = dict(
        n_total=n_total,
        n_valid=n_valid,
        pairs=allpairs,
        triples=triples,
        n_raw_pairs=sum(len(AXES[NAMES[i]]) * len(AXES[NAMES[j]]) for i, j in col_pairs),
        n_raw_triples=len(AXES["layout"]) * len(AXES["api"]) * len(AXES["storage"]),
        secs=time.time() - t,
    )
    os.makedirs(os.path.dirname(CACHE), exist_ok=True)
    with open(CACHE, "wb") as f:
        pickle.dump(d, f)
    return d


def load():
    if os.path.exists(CACHE):
        with open(CACHE, "rb") as f:
            return pickle.load(f)
    return build()


def check(rows):
    """rows: list of dicts. Returns dict of coverage / validity results."""
    d = load()
    bad = [r for r in rows if set(r) != set(NAMES) or any(r[k] not in AXES[k] for k in NAMES) or not valid(r)]
    got_pairs, got_tri = set(), set()
    for r in rows:
        for i, j in itertools.combinations(range(len(NAMES)), 2):
            got_pairs.add((NAMES[i], r[NAMES[i]], NAMES[j], r[NAMES[j]]))
        got_tri.add(tuple(r[a] for a in TRIPLE))
    return dict(
        rows=len(rows),
        invalid_rows=len(bad),
        invalid_examples=bad[:3],
        missing_pairs=len(d["pairs"] - got_pairs),
        missing_pair_examples=sorted(d["pairs"] - got_pairs)[:5],
        missing_triples=len(d["triples"] - got_tri),
        missing_triple_examples=sorted(d["triples"] - got_tri)[:5],
        valid_pairs=len(d["pairs"]),
        valid_triples=len(d["triples"]),
        dup_rows=len(rows) - len({tuple(r[k] for k in NAMES) for r in rows}),
    )


if __name__ == "__main__":
    d = build()
    print(
        {k: v for k, v in d.items() if k not in ("pairs", "triples")},
        "valid_pairs",
        len(d["pairs"]),
        "valid_triples",
        len(d["triples"]),
    )

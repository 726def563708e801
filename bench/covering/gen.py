"""Generate a covering array with one library.
usage: gen.py LIB MODE SEED OUT.json
  LIB  : covertable | pict | allpairspy
  MODE : pair  (strength 2 over all axes)
         mixedseed (pict only: pairwise + all valid triples as partial seed rows)
         mixed (strength 2 over all axes + strength 3 over layout/api/storage)
         seeded (pair + force SEED_ROWS in)
Writes {"rows": [...], "gen_secs": float}.
"""

import itertools
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from problem import AXES, CLAUSES, NAMES, SEED_ROWS, TRIPLE, valid_partial

lib, mode, seed, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if lib == "pict" and "PYPICT_LDPATH_SET" not in os.environ:
    # self-built pypict wheel is not auditwheel-repaired and libpict.so has no
    # SONAME/rpath: re-exec with LD_LIBRARY_PATH pointing at the package dir.
    import importlib.util

    pkgdir = os.path.dirname(importlib.util.find_spec("pypict").origin)
    env = dict(
        os.environ,
        PYPICT_LDPATH_SET="1",
        LD_LIBRARY_PATH=pkgdir + ":" + os.environ.get("LD_LIBRARY_PATH", ""),
    )
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
extra = {}


# ---------------------------------------------------------------- covertable
def run_covertable():
    import covertable

    # one 'fn' constraint per clause; 'requires' lets covertable evaluate it as
    # soon as those two axes are set (Kleene logic: None = not decidable yet).
    constraints = [
        {"operator": "fn", "requires": list(keys), "evaluate": (lambda row, fn=fn: fn(row))}
        for keys, fn in CLAUSES
    ]
    kw = dict(strength=2, constraints=constraints, salt=str(seed))  # sorter=hash (default) + salt
    if mode == "mixed":
        kw["sub_models"] = [{"fields": list(TRIPLE), "strength": 3}]
    if mode == "seeded":
        kw["presets"] = SEED_ROWS
    ctrl = covertable.Controller(dict(AXES), **kw)
    rows = ctrl.make()
    extra["uncovered_reported"] = len(ctrl.stats["uncovered_pairs"])
    return [dict(r) for r in rows]


# ---------------------------------------------------------------- PICT
def pict_literal(axis, v):
    numeric = all(x.lstrip("-").isdigit() for x in AXES[axis])
    return v if numeric else f'"{v}"'


def pict_model():
    lines = ["{}: {}".format(k, ", ".join(v)) for k, v in AXES.items()]
    if mode == "mixed":
        lines.append("{{ {} }} @ 3".format(", ".join(TRIPLE)))
    lines.append("")
    # translate each 2-axis clause into PICT constraints by enumerating it
    for (a, b), fn in CLAUSES:
        for va in AXES[a]:
            ok = [vb for vb in AXES[b] if fn({a: va, b: vb})]
            if len(ok) == len(AXES[b]):
                continue
            if not ok:
                lines.append(f"[{a}] <> {pict_literal(a, va)};")
            else:
                lines.append(
                    "IF [{}] = {} THEN [{}] IN {{{}}};".format(
                        a, pict_literal(a, va), b, ", ".join(pict_literal(b, x) for x in ok)
                    )
                )
    return "\n".join(lines) + "\n"


def run_pict():
    from pypict import capi

    d = tempfile.mkdtemp()
    mpath = os.path.join(d, "model.txt")
    model = pict_model()
    with open(mpath, "w") as f:
        f.write(model)
    with open(os.path.join(os.path.dirname(out), f"pict_model_{mode}.txt"), "w") as f:
        f.write(model)
    args = [mpath, "/o:2", "/r:%d" % seed]
    seeds = []
    if mode == "seeded":
        seeds = SEED_ROWS
    if mode == "mixedseed":
        # workaround for mixed strength: pairwise model + every (partially) valid
        # (layout, api, storage) triple given as a *partial* seed row.
        seeds = [
            dict(zip(TRIPLE, t))
            for t in itertools.product(*(AXES[a] for a in TRIPLE))
            if valid_partial(dict(zip(TRIPLE, t)))
        ]
        extra["seed_triples"] = len(seeds)
    if seeds:
        spath = os.path.join(d, "seed.txt")
        with open(spath, "w") as f:
            f.write("\t".join(NAMES) + "\n")
            for r in seeds:
                f.write("\t".join(r.get(k, "") for k in NAMES) + "\n")
        args.append("/e:" + spath)
    text = capi.execute(args)
    lines = [l for l in text.splitlines() if l.strip()]
    hdr = lines[0].split("\t")
    return [dict(zip(hdr, l.split("\t"))) for l in lines[1:]]


# ---------------------------------------------------------------- allpairspy
def run_allpairspy():
    from collections import OrderedDict

    from allpairspy import AllPairs

    if mode == "mixed":
        # workaround: no mixed strength -> merge the 3 axes into one axis whose
        # values are the (partially) valid triples, then pairwise.
        trip = [
            "|".join(t)
            for t in itertools.product(*(AXES[a] for a in TRIPLE))
            if valid_partial(dict(zip(TRIPLE, t)))
        ]
        params = OrderedDict([("lasx", trip)] + [(k, v) for k, v in AXES.items() if k not in TRIPLE])
        names = list(params)

        def expand(vals):
            r = dict(zip(names, vals))
            if "lasx" in r:
                r.update(zip(TRIPLE, r.pop("lasx").split("|")))
            return r

        extra["merged_axis_values"] = len(trip)
    else:
        params = OrderedDict(AXES)
        names = NAMES

        def expand(vals):
            return dict(zip(names, vals))

    kw = {}
    if mode == "seeded":
        # previously_tested = rows whose pairs count as covered; they are NOT
        # emitted, so we prepend them ourselves.
        kw["previously_tested"] = [[r[k] for k in names] for r in SEED_ROWS]
    gen = AllPairs(params, filter_func=lambda vals: valid_partial(expand(vals)), n=2, **kw)
    rows = [expand(list(r)) for r in gen]
    if mode == "seeded":
        rows = [dict(r) for r in SEED_ROWS] + rows
    return rows


t0 = time.perf_counter()
rows = {"covertable": run_covertable, "pict": run_pict, "allpairspy": run_allpairspy}[lib]()
secs = time.perf_counter() - t0
with open(out, "w") as f:
    json.dump({"rows": rows, "gen_secs": secs, "extra": extra}, f, indent=0)
print(lib, mode, seed, len(rows), f"{secs:.2f}s")

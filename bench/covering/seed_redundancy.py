"""Does each library keep a forced row whose pairs are all already covered?
Seed = a full pairwise suite (from PICT, /r:1) + SEED_ROWS appended last."""

import csv
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker
from problem import AXES, CLAUSES, NAMES, SEED_ROWS

base = json.load(open("out/t_pict.json"))["rows"]  # 197-row full pairwise suite
extra = [r for r in SEED_ROWS if r not in base]
seeds = base + extra


def key(r):
    return tuple(r[k] for k in NAMES)


res = {}
# PICT CLI
with open("out/seed_full.txt", "w") as f:
    f.write("\t".join(NAMES) + "\n")
    for r in seeds:
        f.write("\t".join(r[k] for k in NAMES) + "\n")
txt = subprocess.run(
    ["src/pypict/pict/pict", "out/pict_model_pair.txt", "/e:out/seed_full.txt", "/r:1"],
    capture_output=True,
    text=True,
).stdout
rows = list(csv.DictReader(txt.splitlines(), delimiter="\t"))
got = {key(r) for r in rows}
res["pict"] = dict(
    rows=len(rows),
    seeds=len(seeds),
    seeds_kept=sum(key(r) in got for r in seeds),
    extra_kept=[key(r) in got for r in extra],
)
# covertable presets
import covertable

cons = [
    {"operator": "fn", "requires": list(k), "evaluate": (lambda row, fn=fn: fn(row))} for k, fn in CLAUSES
]
rows = covertable.make(dict(AXES), strength=2, constraints=cons, presets=seeds)
got = {key(r) for r in rows}
res["covertable"] = dict(
    rows=len(rows),
    seeds=len(seeds),
    seeds_kept=sum(key(r) in got for r in seeds),
    extra_kept=[key(r) in got for r in extra],
)
# covertable with an invalid preset + a partial preset
bad = dict(SEED_ROWS[0], layout="plain")  # plain only with sd_full -> invalid
part = {"layout": "pp_fsdp", "api": "dsd_full_flat"}
rows = covertable.make(dict(AXES), strength=2, constraints=cons, presets=[bad, part])
res["covertable_invalid_and_partial_preset"] = dict(
    first_row=rows[0],
    invalid_emitted=any(key(r) == key(bad) for r in rows),
    invalid_rows=checker.check(rows)["invalid_rows"],
)
print(json.dumps(res, indent=1))
json.dump(res, open("out/seed_redundancy.json", "w"), indent=1)

"""FSDP2 (DTensor) state dicts pickled with torch.save break across adjacent torch releases.

A DTensor pickles its DTensorSpec, which pickles the DeviceMesh's ``__dict__`` (private attributes
included) and its ``_MeshLayout``. Each release that renames, adds or restructures one of these
private attributes breaks per-rank ``torch.save`` / ``torch.load(weights_only=False)`` files in one or
both directions. The failure shows at unpickling, or only later, when the loaded DTensor is used:
  old -> new: 2.9.1 -> 2.10.0 "'DeviceMesh' object has no attribute '_mesh_dim_names'";
              2.10.0 -> 2.11.0 the load passes, then full_tensor()/redistribute raises "ValueError:
              use_strided_shard_as_shard_order should be initialized in DTensorSpec.__post_init__()"
              (the field was added to DTensorSpec by PR #174831; unpickling skips __post_init__);
              2.12.1 -> 2.13.0 "'_MeshLayout' object has no attribute 'axes'" (PR #172089 rewrote
              _MeshLayout on top of _FlatLayout);
              2.14.1 -> 2.15.0 "'DeviceMesh' object has no attribute '_preserve_rank_order'".
  new -> old: 2.10.0 -> 2.9.1 "No module named 'torch.distributed._mesh_layout'";
              2.13.0 -> 2.12.1 "Can't get attribute '_FlatLayout' on <module
              'torch.distributed._mesh_layout'>".
No PyTorch doc states whether a torch.save'd DTensor loads in another version.

Seen (the suite's cross-version grid, fsdp2-dsd_sharded-torch_save_per_rank, 2 ranks, gloo): the
six pairs above fail, as do 2.9.1 -> 2.15.0 and 2.15.0 -> 2.9.1; 2.11 <-> 2.12, 2.13 <-> 2.14,
2.11.0 -> 2.10.0 and 2.15.0 -> 2.14.1 pass.

Run (2 spawned ranks, gloo, CPU; a 2-layer MLP under fully_shard + AdamW, one step):
    /path/to/torch-X/bin/python dtensor_pickle_across_versions.py save DIR
    /path/to/torch-Y/bin/python dtensor_pickle_across_versions.py load DIR
``save`` writes DIR/rank{r}.pt = torch.save({"model": model.state_dict(), "optim":
optim.state_dict()}) per rank, and the full values as raw bytes in DIR/expected.json. ``load`` builds
a fresh model + optimizer, torch.load(weights_only=False)s its rank's file, runs
model.load_state_dict and optim.load_state_dict, then reads every parameter and every optimizer
state tensor back with full_tensor(). Exit 1 + "BUG PRESENT:" if any of that raises on any rank or a
value differs bitwise, 0 + "FIXED:" if all match, 2 on a usage/setup failure or a hang.
"""

import datetime
import json
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

WORLD = 2
TIMEOUT_S = 240  # hang guard only


def raw(t):
    """Version-independent record of a tensor: dtype, shape and its bytes in hex."""
    t = t.detach().cpu().contiguous().flatten()
    return {"dtype": str(t.dtype), "shape": list(t.shape), "hex": bytes(t.view(torch.uint8).tolist()).hex()}


def full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def read_back(model, optim):
    """Every parameter and optimizer state tensor, gathered to full tensors (collective)."""
    names = {p: n for n, p in model.named_parameters()}
    out = {f"param/{n}": raw(full(p)) for n, p in model.named_parameters()}
    for p, st in optim.state.items():
        for k, v in st.items():
            out[f"optim/{names[p]}/{k}"] = raw(full(v))
    return out


def save_rank(rank, d):
    model, optim = build()
    torch.manual_seed(1)
    model(torch.randn(4, 5)).sum().backward()
    optim.step()
    torch.save({"model": model.state_dict(), "optim": optim.state_dict()}, os.path.join(d, f"rank{rank}.pt"))
    values = read_back(model, optim)
    if rank == 0:
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump({"torch": torch.__version__, "values": values}, f)
    return {"ok": True}


def load_rank(rank, d):
    with open(os.path.join(d, "expected.json")) as f:
        expected = json.load(f)
    model, optim = build()
    step = "torch.load"
    try:
        sd = torch.load(os.path.join(d, f"rank{rank}.pt"), weights_only=False)
        step = "model.load_state_dict"
        model.load_state_dict(sd["model"])
        step = "optim.load_state_dict"
        optim.load_state_dict(sd["optim"])
        step = "full_tensor() of the loaded state"
        got = read_back(model, optim)
    except Exception as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]  # the first parameter's
        return {"ok": False, "saved_by": expected["torch"],  # error for load_state_dict's RuntimeError
                "error": f"{step} raised {type(e).__name__}: " + " ".join(lines[:2])}
    bad = sorted(k for k in expected["values"] if got.get(k) != expected["values"][k])
    extra = sorted(set(got) - set(expected["values"]))
    if bad or extra:
        err = f"values differ bitwise: {bad}, unexpected: {extra}"
        return {"ok": False, "saved_by": expected["torch"], "error": err}
    return {"ok": True, "saved_by": expected["torch"], "n": len(got)}


def worker(rank, mode, d, tmp):
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S // 2),
        )
        res = save_rank(rank, d) if mode == "save" else load_rank(rank, d)
        dist.destroy_process_group()
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "load"):
        print(__doc__)
        print("usage: python dtensor_pickle_across_versions.py save|load DIR")
        return 2
    mode, d = sys.argv[1], os.path.abspath(sys.argv[2])
    os.makedirs(d, exist_ok=True)
    tmp = tempfile.mkdtemp()
    ctx = mp.start_processes(worker, args=(mode, d, tmp), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
    res = []
    for r in range(WORLD):
        with open(os.path.join(tmp, f"rank{r}.json")) as f:
            res.append(json.load(f))
    for r, x in enumerate(res):
        if "setup_error" in x:
            print(f"ERROR: rank {r} setup failure:\n{x['setup_error']}")
            return 2
    if mode == "save":
        print(f"saved with torch {torch.__version__} to {d}")
        return 0
    where = f"saved by torch {res[0]['saved_by']}, loaded by torch {torch.__version__}"
    failed = [(r, x["error"]) for r, x in enumerate(res) if not x["ok"]]
    if failed:
        r, err = failed[0]
        print(f"BUG PRESENT: {where}: rank {r}: {err[:1500]}")
        return 1
    print(f"FIXED: {where}: all {res[0]['n']} parameter/optimizer tensors equal bitwise on every rank")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

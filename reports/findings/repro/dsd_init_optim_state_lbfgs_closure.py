"""DSD cannot load (or even template) the state of a fresh torch.optim.LBFGS: step() is called without a closure.

Bug: torch.distributed.checkpoint.state_dict (DSD) initialises a fresh optimizer's lazily created
state in _init_optim_state (torch/distributed/checkpoint/state_dict.py) by giving every parameter a
zero gradient, setting lr to 0 and calling ``optim.step(closure=None)`` (line 662 in 2.13.0).
LBFGS.step requires a closure and calls it first (``orig_loss = closure()``, torch/optim/lbfgs.py
line 357), so every DSD call that reaches _init_optim_state with a fresh LBFGS raises
"TypeError: 'NoneType' object is not callable". That covers both halves of the usual DCP resume:
get_state_dict(fresh_model, fresh_lbfgs) (building the dcp.load template; _get_optim_state_dict ->
_init_optim_state) and set_state_dict / set_optimizer_state_dict (_load_optim_state_dict ->
_init_optim_state). Saving from a trained LBFGS works, because optim.state is then non-empty and
the init step is skipped. Here: DDP (gloo, 1 rank) around nn.Linear(4, 4, bias=False), LBFGS(lr=0.1,
max_iter=2, history_size=3) trained 2 steps with a closure. In exploration the same TypeError came
with FSDP2 (fully_shard) and with a plain nn.Module without any process group; it is independent of
the parallelism because _init_optim_state only touches the optimizer.

Correct behaviour: the state of a trained LBFGS, taken with get_state_dict, loads into a fresh
model + LBFGS both in memory (set_state_dict) and through DCP (template from get_state_dict on the
fresh optimizer, dcp.load, set_state_dict), restoring state equal to the saved one -- as plain
torch LBFGS.load_state_dict does (setup check) and as the same DDP+DCP pipeline does for Adam
(control line). A one-parameter model is used on purpose: LBFGS keeps its (global) state on its
first parameter only, so with more parameters DSD's strict load would in addition raise
"Missing optimizer state for parameter 'bias'" (the strict check also hit by
pytorch/pytorch#192202); that is printed as an "(info)" line and does not affect the exit code.
Note for a fix: merely skipping the init step for LBFGS is not enough for DCP -- the template
would then hold no LBFGS state, dcp.load would request none, and the state would be silently
dropped; this script reports that outcome as still broken.

Seen on: torch 2.13.0+cpu (gloo, CPU, 1 rank).
Upstream: not found (likely new); searched issues and closed/merged PRs. Related:
pytorch/pytorch#133415 (closed; _init_optim_state's dummy step and stateless optimizers),
pytorch/pytorch#192202 (open; _init_optim_state / strict missing-state check). Docs: DSD's
get_state_dict/set_optimizer_state_dict take any torch.optim.Optimizer and only warn to call
set_* "before backward() or after step()" (done here); LBFGS's docs say step(closure) requires the
closure. No optimizer is excluded.

Run: python reports/findings/repro/dsd_init_optim_state_lbfgs_closure.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import copy
import datetime
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 1
TIMEOUT_S = 180  # hang guard only; generous because the 2-core machine may be shared
X = None  # set per process


def make_lbfgs(params):
    return torch.optim.LBFGS(params, lr=0.1, max_iter=2, history_size=3)


def make_adam(params):
    return torch.optim.Adam(params, lr=0.1)


def build(make_opt, bias=False):
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 4, bias=bias))
    return model, make_opt(model.parameters())


def train(model, optim):
    def closure():
        optim.zero_grad()
        loss = (model(X) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(2):
        optim.step(closure)
    optim.zero_grad(set_to_none=True)


def same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b))
        )
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            same(a[k], b[k]) for k in a
        )
    return a == b


def err(e):
    frames = traceback.extract_tb(e.__traceback__)
    where = ", ".join(
        f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
        for f in frames
        if "torch" in f.filename and "_contextlib" not in f.filename
    )
    return f"{type(e).__name__}: {e} [{where}]"


def round_trip(make_opt, tmp, tag):
    """Train, save (get_state_dict + dcp.save), then load into fresh copies two ways."""
    model, optim = build(make_opt)
    train(model, optim)
    ref = copy.deepcopy(optim.state_dict()["state"])
    msd, osd = get_state_dict(model, optim)
    path = os.path.join(tmp, f"ckpt_{tag}")
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    out = {"saved_state_keys": sorted(str(k) for s in ref.values() for k in s)}

    # (a) in memory: set_state_dict of the dict get_state_dict returned
    fresh, fresh_optim = build(make_opt)
    try:
        set_state_dict(fresh, fresh_optim, model_state_dict=msd, optim_state_dict=osd)
        got = fresh_optim.state_dict()["state"]
        out["in_memory"] = "restored" if same(ref, got) else f"no error, but state differs: {sorted(got)}"
    except Exception as e:
        out["in_memory"] = err(e)

    # (b) through DCP: template from the fresh optimizer, dcp.load, set_state_dict
    fresh, fresh_optim = build(make_opt)
    try:
        tmsd, tosd = get_state_dict(fresh, fresh_optim)
        sd = {"model": tmsd, "optim": tosd}
        dcp.load(sd, checkpoint_id=path)
        set_state_dict(fresh, fresh_optim, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        got = fresh_optim.state_dict()["state"]
        out["dcp"] = (
            "restored"
            if same(ref, got)
            else "no error, but state not restored: loaded state keys "
            + str(sorted(str(k) for s in got.values() for k in s))
        )
    except Exception as e:
        out["dcp"] = err(e)
    return out


def worker(rank, tmp):
    global X
    res = {}
    try:
        warnings.filterwarnings("ignore")
        X = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        # setup check: plain torch round trip of LBFGS state
        m, o = build(make_lbfgs)
        train(m, o)
        _, o2 = build(make_lbfgs)
        o2.load_state_dict(copy.deepcopy(o.state_dict()))
        if not same(o.state_dict()["state"], o2.state_dict()["state"]):
            raise RuntimeError("plain LBFGS.load_state_dict did not restore the state")
        res["adam"] = round_trip(make_adam, tmp, "adam")
        res["lbfgs"] = round_trip(make_lbfgs, tmp, "lbfgs")
        # (info) two-parameter model: even with the init step dodged (grads pre-set), strict load fails
        try:
            m, o = build(make_lbfgs, bias=True)
            train(m, o)
            msd, osd = get_state_dict(m, o)
            f, fo = build(make_lbfgs, bias=True)
            for p in f.parameters():
                p.grad = torch.zeros_like(p)  # makes _init_optim_state return early
            set_state_dict(f, fo, model_state_dict=msd, optim_state_dict=osd)
            res["info_bias"] = "loads"
        except Exception as e:
            res["info_bias"] = err(e)
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def main():
    tmp = tempfile.mkdtemp()
    ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            if ctx.join(timeout=1):
                break
        except Exception as e:  # a rank died; judge from what it wrote (teardown crashes are not setup failures)
            print(f"(note) a rank exited abnormally: {type(e).__name__}")
            break
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
    path = os.path.join(tmp, "rank0.json")
    if not os.path.exists(path):
        print("ERROR: rank 0 wrote no result")
        return 2
    with open(path) as f:
        res = json.load(f)
    if "setup_error" in res:
        print(f"rank 0 setup failure:\n{res['setup_error']}")
        return 2
    adam, lbfgs = res["adam"], res["lbfgs"]
    print(f"control Adam: in-memory set_state_dict -> {adam['in_memory']}; DCP round trip -> {adam['dcp']}")
    if adam["in_memory"] != "restored" or adam["dcp"] != "restored":
        print("ERROR: the Adam control does not round-trip; cannot judge")
        return 2
    print(f"LBFGS saved state keys: {lbfgs['saved_state_keys']}")
    print(f"LBFGS in-memory set_state_dict into fresh LBFGS -> {lbfgs['in_memory']}")
    print(f"LBFGS DCP round trip (fresh get_state_dict template, dcp.load, set_state_dict) -> {lbfgs['dcp']}")
    print(f"(info) 2-parameter model, init step dodged with pre-set grads, strict set_state_dict -> {res['info_bias']}")
    if lbfgs["in_memory"] == "restored" and lbfgs["dcp"] == "restored":
        print("FIXED: DSD loads LBFGS state into a fresh LBFGS, in memory and through DCP")
        return 0
    closure = "'NoneType' object is not callable" in lbfgs["in_memory"] + lbfgs["dcp"]
    if closure:
        print(
            "BUG PRESENT: DSD's _init_optim_state calls LBFGS.step(closure=None) on the fresh optimizer "
            "-> TypeError: 'NoneType' object is not callable"
        )
    else:
        print("BUG PRESENT: the closure TypeError is gone, but LBFGS state still does not round-trip (see above)")
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

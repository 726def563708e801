"""DSD full_state_dict round trip turns AdamW's ``betas`` tuple into a list.

Bug: with torch.distributed.checkpoint.state_dict, get_state_dict(model, optim,
options=StateDictOptions(full_state_dict=True)) returns param_groups[0]["betas"] == (0.9, 0.99) as a
tuple, but after set_state_dict(...) of that dict (same options) into a freshly built FSDP2
(fully_shard) model + AdamW, the fresh optimizer's param_groups[0]["betas"] is the list [0.9, 0.99].
The full-state-dict load path flattens and unflattens the optimizer state dict
(_flatten_state_dict/_unflatten_state_dict in torch/distributed/_state_dict_utils.py, called from
_load_optim_state_dict in torch/distributed/checkpoint/state_dict.py), and _set_element rebuilds every
integer-indexed container as a list, so tuples in param_groups do not survive.

Correct behaviour: the loaded hyperparameter has the type it was saved with (a tuple), as it does with
full_state_dict=False (printed as a control line).

Seen on: torch 2.13.0+cpu (gloo, CPU, 1 rank).
Upstream: not found (likely new).

Run: python reports/findings/repro/dsd_full_betas_list.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
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
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

WORLD = 1
TIMEOUT_S = 180  # hang guard only; generous because the 2-core machine may be shared
BETAS = (0.9, 0.99)


def build():
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=0.1, betas=BETAS)


def round_trip(full):
    """Train one step, get the state dict, load it into a fresh model+optimizer; report betas types."""
    opts = StateDictOptions(full_state_dict=full)
    model, optim = build()
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    msd, osd = get_state_dict(model, optim, options=opts)
    saved = osd["param_groups"][0]["betas"]
    saved_repr = f"{type(saved).__name__} {saved!r}"  # osd may be modified in place by the load
    fresh, fresh_optim = build()
    set_state_dict(fresh, fresh_optim, model_state_dict=msd, optim_state_dict=osd, options=opts)
    loaded = fresh_optim.param_groups[0]["betas"]
    return {
        "saved": saved_repr,
        "loaded": f"{type(loaded).__name__} {loaded!r}",
        "ok": type(loaded) is tuple and loaded == BETAS,
    }


def worker(rank, tmp):
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        res = {"sharded": round_trip(full=False), "full": round_trip(full=True)}
        dist.destroy_process_group()
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


def main():
    tmp = tempfile.mkdtemp()
    ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
    with open(os.path.join(tmp, "rank0.json")) as f:
        res = json.load(f)
    if "setup_error" in res:
        print(f"rank 0 setup failure:\n{res['setup_error']}")
        return 2
    ctl, full = res["sharded"], res["full"]
    print(f"control full_state_dict=False: saved {ctl['saved']}, loaded {ctl['loaded']}")
    if not ctl["ok"]:
        print("ERROR: control round trip lost the betas tuple too; cannot judge")
        return 2
    if not full["ok"]:
        print(
            f"BUG PRESENT: full_state_dict=True round trip: betas saved as {full['saved']}, "
            f"loaded as {full['loaded']}"
        )
        return 1
    print(
        f"FIXED: full_state_dict=True round trip keeps betas: saved {full['saved']}, loaded {full['loaded']}"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

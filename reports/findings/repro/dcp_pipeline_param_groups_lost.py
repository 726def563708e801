"""DCP + get/set_state_dict on pipeline stages: a stage's param-group hyperparameters are lost.

Bug: each rank holds one pipeline stage, a different part of one model under the full model's
names (torchtitan's manual split). Each rank takes get_state_dict(model, optim) with the default
StateDictOptions, saves it with dcp.save, and loads it back into a fresh stage and optimizer
(get_state_dict as the template, dcp.load, set_state_dict). After the load one stage's
optimizer.param_groups[0] has no 'lr', 'betas', 'eps' or 'weight_decay' any more, without an
error; the next optimizer.step() would raise KeyError: 'lr'. The unflattened optimizer state
dict lists param_groups by index, so DCP stores "optim.param_groups.0.params" and ".lr" under
one key for every rank and keeps one rank's copy, as it does for any value saved under one key
on several ranks; set_state_dict then finds no group for the other stage's parameters.

Control: the same with StateDictOptions(flatten_optimizer_state_dict=True) (param groups keyed
by parameter name; the option torchtitan sets for its pipeline stages) keeps every
hyperparameter.

Seen on: torch 2.13.0+cpu and 2.15.0 (gloo, CPU, 2 ranks).
Run: python reports/findings/repro/dcp_pipeline_param_groups_lost.py
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
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

WORLD = 2
TIMEOUT_S = 180  # hang guard only
HYPER = ("lr", "betas", "eps", "weight_decay")


def stage(rank, seed):
    """Stage `rank` of a two-layer model: the other stage's layer is dropped, names kept."""
    torch.manual_seed(seed)
    model = nn.ModuleDict({"first": nn.Linear(4, 4), "second": nn.Linear(4, 4)})
    del model["second" if rank == 0 else "first"]
    return model, torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.9, 0.99), weight_decay=0.01)


def round_trip(rank, path, flatten):
    options = StateDictOptions(flatten_optimizer_state_dict=True) if flatten else StateDictOptions()
    model, optim = stage(rank, 0)
    sum(p.pow(2).sum() for p in model.parameters()).backward()
    optim.step()
    msd, osd = get_state_dict(model, optim, options=options)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    fresh, fresh_optim = stage(rank, 1)
    msd, osd = get_state_dict(fresh, fresh_optim, options=options)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(fresh, fresh_optim, model_state_dict=state["model"], optim_state_dict=state["optim"], options=options)
    return [k for k in HYPER if k not in fresh_optim.param_groups[0]]


def worker(rank, tmp):
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        res = {
            "flattened": round_trip(rank, os.path.join(tmp, "flat"), flatten=True),
            "default": round_trip(rank, os.path.join(tmp, "default"), flatten=False),
        }
        dist.barrier()
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    os._exit(0)  # the verdict is written; no teardown can change the exit code


def main():
    tmp = tempfile.mkdtemp()
    ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while not all(os.path.exists(os.path.join(tmp, f"rank{r}.json")) for r in range(WORLD)):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
        time.sleep(0.2)
    results = []
    for rank in range(WORLD):
        with open(os.path.join(tmp, f"rank{rank}.json")) as f:
            results.append(json.load(f))
    errors = [r["setup_error"] for r in results if "setup_error" in r]
    if errors:
        print(f"setup failure:\n{errors[0]}")
        return 2
    if any(r["flattened"] for r in results):
        print(f"ERROR: the control (flatten_optimizer_state_dict=True) lost hyperparameters too: {results}")
        return 2
    print("control flatten_optimizer_state_dict=True: every stage keeps lr, betas, eps, weight_decay")
    lost = {rank: r["default"] for rank, r in enumerate(results) if r["default"]}
    if lost:
        print(f"BUG PRESENT: default options, after dcp.load + set_state_dict, param_groups[0] lacks {lost} (rank: keys)")
        return 1
    print("FIXED: default options keep every stage's hyperparameters")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

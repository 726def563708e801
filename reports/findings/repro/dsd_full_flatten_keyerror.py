"""set_state_dict cannot load what get_state_dict gave with full_state_dict and
flatten_optimizer_state_dict both on: KeyError: 'param_groups.0.params.0'.

Bug: with StateDictOptions(full_state_dict=True, flatten_optimizer_state_dict=True),
get_state_dict(model, optim) returns a flattened full optimizer state dict, and
set_state_dict(model, optim, model_state_dict=..., optim_state_dict=..., options=<the same>) of
exactly that dict raises KeyError: 'param_groups.0.params.0' in _unflatten_state_dict
(torch/distributed/_state_dict_utils.py, from _load_optim_state_dict). Nothing is saved or read
from disk: the dict goes straight back. A plain module on each rank is enough.

Control: the same with full_state_dict=False (flattened, sharded) loads.

Seen on: torch 2.13.0+cpu and 2.15.0 (gloo, CPU, 2 ranks).
Run: python reports/findings/repro/dsd_full_flatten_keyerror.py
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

WORLD = 2
TIMEOUT_S = 180  # hang guard only


def round_trip(full):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    optim = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    options = StateDictOptions(full_state_dict=full, flatten_optimizer_state_dict=True)
    msd, osd = get_state_dict(model, optim, options=options)
    try:
        set_state_dict(model, optim, model_state_dict=msd, optim_state_dict=osd, options=options)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


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
    with open(os.path.join(tmp, "rank0.json")) as f:
        res = json.load(f)
    if "setup_error" in res:
        print(f"rank 0 setup failure:\n{res['setup_error']}")
        return 2
    if res["sharded"]:
        print(f"ERROR: the control (full_state_dict=False) raised too: {res['sharded']}")
        return 2
    print("control full_state_dict=False, flatten_optimizer_state_dict=True: set_state_dict loads")
    if res["full"]:
        print(f"BUG PRESENT: full_state_dict=True, flatten_optimizer_state_dict=True: set_state_dict raised {res['full']}")
        return 1
    print("FIXED: set_state_dict loads the flattened full state dict")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

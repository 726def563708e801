"""DSD cannot load its own optimizer state dict when a trainable parameter never got a gradient.

Bug: a model has a trainable nn.Linear ("idle") that is in the optimizer but is not used in forward,
so it never receives a gradient and AdamW creates no state for it. get_state_dict(model, optim) on an
FSDP2 (fully_shard) model at 2 ranks returns an optimizer state without "idle.weight"/"idle.bias":
_init_optim_state in torch/distributed/checkpoint/state_dict.py returns early as soon as optim.state is
non-empty, so the idle parameters are never initialized. set_state_dict of that very dict into a fresh
model + optimizer then raises "RuntimeError: Missing optimizer state for parameter 'idle.weight' in
checkpoint ... use StateDictOptions(strict=False)" (the default strict=True check).
In exploration the same error also came with full_state_dict=True, with DDP, with an unwrapped module,
at 1 rank, and whether or not the fresh optimizer took a step before the load.

Correct behaviour: a state dict produced by get_state_dict loads back with set_state_dict and default
options. A control line shows that the same dict loads with strict=False.

Seen on: torch 2.13.0+cpu (gloo, CPU, 2 ranks).
Upstream: https://github.com/pytorch/pytorch/issues/192202 (open);
fix PR https://github.com/pytorch/pytorch/pull/192307 (open).

Run: python reports/findings/repro/idle_param_missing_optimizer_state.py
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

WORLD = 2
TIMEOUT_S = 180  # hang guard only; generous because the 2-core machine may be shared


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.idle = nn.Linear(4, 4)  # trainable, in the optimizer, never in forward

    def forward(self, x):
        return self.used(x)


def build():
    torch.manual_seed(0)
    model = TwoHeads()
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def load(msd, osd, strict):
    """Load into a fresh model+optimizer. Returns None on success, else the error text."""
    fresh, fresh_optim = build()
    try:
        set_state_dict(
            fresh,
            fresh_optim,
            model_state_dict=msd,
            optim_state_dict=osd,
            options=StateDictOptions(strict=strict),
        )
        return None
    except Exception as e:  # the bug surfaces as RuntimeError
        return f"{type(e).__name__}: {e}".replace("\n", " ")[:300]


def worker(rank, tmp):
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        model, optim = build()
        model(torch.randn(2, 4)).sum().backward()
        optim.step()
        msd, osd = get_state_dict(model, optim)
        res = {
            "saved_keys": sorted(osd["state"]),
            "control_non_strict": load(msd, osd, strict=False),
            "strict": load(msd, osd, strict=True),
        }
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
    results = []
    for r in range(WORLD):
        with open(os.path.join(tmp, f"rank{r}.json")) as f:
            results.append(json.load(f))
    for r, res in enumerate(results):
        if "setup_error" in res:
            print(f"rank {r} setup failure:\n{res['setup_error']}")
            return 2
    print(f"saved optimizer state keys (rank 0): {results[0]['saved_keys']}")
    for r, res in enumerate(results):
        ctl = res["control_non_strict"]
        print(f"control strict=False rank {r}: {'load OK' if ctl is None else ctl}")
        if ctl is not None:
            print("ERROR: control load failed too; cannot judge")
            return 2
    failed = {r: res["strict"] for r, res in enumerate(results) if res["strict"] is not None}
    if failed:
        for r, err in failed.items():
            print(f"BUG PRESENT: set_state_dict of get_state_dict's own output failed on rank {r}: {err}")
        return 1
    print("FIXED: the state dict with an idle parameter loaded back with default options on all ranks")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

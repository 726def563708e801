"""FSDP1 full optimizer state dict with CPU offload on CPU returns exp_avg == exp_avg_sq.

Bug: FSDP1 (use_orig_params=True, FULL_SHARD, CPU, gloo, 2 ranks) + AdamW after a few steps. Under
FSDP.state_dict_type(model, FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=False),
FullOptimStateDictConfig(offload_to_cpu=True)), FSDP.optim_state_dict(model, optim) returns on rank 0
an "exp_avg" that is bitwise equal to "exp_avg_sq" for every parameter. _allgather_orig_param_states
(torch/distributed/fsdp/_optim_utils.py) all-gathers every state name into one reused gathered_tensor,
and _unflatten_orig_param_states only clones the views when not offloading, relying on .cpu() to copy;
on a CPU tensor .cpu() returns the same tensor, so all state names end up viewing the last one gathered.
The legacy FSDP.full_optim_state_dict (offloads by default) shows the same (printed as an extra line).

Correct behaviour: the offloaded dict equals the one with offload_to_cpu=False, which in turn equals an
all-gather of each rank's local optimizer shards (the truth; checked here, exact comparison).

Seen on: torch 2.13.0+cpu (gloo, CPU, 2 ranks).
Upstream: not found (likely new); same family (CPU offload on a CPU-only run) as
https://github.com/pytorch/pytorch/issues/188989.

Run: python reports/findings/repro/fsdp1_optim_offload_exp_avg_aliases.py
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
from torch.distributed.fsdp import (
    FullOptimStateDictConfig,
    FullStateDictConfig,
    ShardingStrategy,
    StateDictType,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

WORLD = 2
TIMEOUT_S = 180  # hang guard only; generous because the 2-core machine may be shared
NAMES = ("exp_avg", "exp_avg_sq")


def gathered_truth(model, optim, shapes):
    """Concatenate every rank's local (flat, contiguous, rank-ordered) shard of each state tensor."""
    local = {}
    for name, p in model.named_parameters():
        st = optim.state.get(p, {})
        local[name.replace("_fsdp_wrapped_module.", "")] = {
            k: st[k].detach().flatten().clone() if k in st else torch.empty(0) for k in NAMES
        }
    per_rank = [None] * WORLD
    dist.all_gather_object(per_rank, local)
    return {n: {k: torch.cat([r[n][k] for r in per_rank]).view(s) for k in NAMES} for n, s in shapes.items()}


def check(osd, truth):
    return {
        n: {
            "alias": torch.equal(osd["state"][n]["exp_avg"], osd["state"][n]["exp_avg_sq"]),
            **{k: torch.equal(osd["state"][n][k], truth[n][k]) for k in NAMES},
        }
        for n in truth
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
        torch.manual_seed(0)
        module = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))  # 58 elements: 0.weight spans both ranks
        shapes = {n: p.shape for n, p in module.named_parameters()}
        model = FSDP(
            module,
            use_orig_params=True,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            device_id=torch.device("cpu"),
        )  # FSDP1 needs an explicit CPU device_id
        optim = torch.optim.AdamW(model.parameters(), lr=0.1)
        torch.manual_seed(1 + rank)
        for _ in range(3):
            model(torch.randn(3, 4)).sum().backward()
            optim.step()
            optim.zero_grad()
        truth = gathered_truth(model, optim, shapes)
        res = {}
        for offload in (False, True):
            with FSDP.state_dict_type(
                model,
                StateDictType.FULL_STATE_DICT,
                FullStateDictConfig(offload_to_cpu=False),
                FullOptimStateDictConfig(offload_to_cpu=offload),
            ):
                res[f"offload_{offload}"] = FSDP.optim_state_dict(model, optim)
        res["legacy"] = FSDP.full_optim_state_dict(model, optim)  # rank0_only: empty on rank 1
        res = {k: check(v, truth) for k, v in res.items()} if rank == 0 else {}
        dist.destroy_process_group()
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


def summary(res):
    return "; ".join(
        f"{n}: exp_avg==exp_avg_sq {c['alias']}, exp_avg right {c['exp_avg']}, "
        f"exp_avg_sq right {c['exp_avg_sq']}"
        for n, c in res.items()
    )


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
        if "setup_error" in results[r]:
            print(f"rank {r} setup failure:\n{results[r]['setup_error']}")
            return 2
    res = results[0]
    print(f"control offload_to_cpu=False (rank 0): {summary(res['offload_False'])}")
    if not all(c["exp_avg"] and c["exp_avg_sq"] and not c["alias"] for c in res["offload_False"].values()):
        print("ERROR: control (no offload) does not match the gathered shards; cannot judge")
        return 2
    print(f"legacy FSDP.full_optim_state_dict (rank 0): {summary(res['legacy'])}")
    bad = [n for n, c in res["offload_True"].items() if c["alias"]]
    if bad:
        print(
            f"BUG PRESENT: FullOptimStateDictConfig(offload_to_cpu=True) gives exp_avg bitwise equal to "
            f"exp_avg_sq on rank 0 for {bad} (no offload: distinct and right): {summary(res['offload_True'])}"
        )
        return 1
    if not all(c["exp_avg"] and c["exp_avg_sq"] for c in res["offload_True"].values()):
        print(f"ERROR: offload result wrong in another way: {summary(res['offload_True'])}")
        return 2
    print("FIXED: offload_to_cpu=True optimizer state matches the gathered shards for every parameter")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

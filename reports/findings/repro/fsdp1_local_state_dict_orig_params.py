"""FSDP1 LOCAL_STATE_DICT with use_orig_params=True: load_state_dict rejects what state_dict wrote.

Limitation: FSDP1 (FullyShardedDataParallel, use_orig_params=True, FULL_SHARD, CPU, gloo, 2 ranks)
around nn.Sequential(Linear, ReLU, Linear), one AdamW step. Under
FSDP.state_dict_type(model, LOCAL_STATE_DICT), model.state_dict() returns the original
parameters (registered on the module with use_orig_params=True) and, added by
_local_post_state_dict_hook (torch/distributed/fsdp/_state_dict_utils.py), a "_flat_param" key: a
ShardedTensor of this rank's flat shard. A freshly built, identically wrapped model under the same
state dict type refuses that very dict in load_state_dict: the flat parameter is not a registered
parameter of the module, so strict loading reports "Error(s) in loading state_dict for
FullyShardedDataParallel: Unexpected key(s) in state_dict: "_flat_param"".

Correct behaviour: the fresh model loads the dict, and its local shards equal the saved ones
(checked here, exact comparison).

Seen on: torch 2.13.0+cpu (gloo, CPU, 2 ranks).
Upstream: https://github.com/pytorch/pytorch/issues/102667 (closed, won't fix: committed to FSDP2).

Run: python reports/findings/repro/fsdp1_local_state_dict_orig_params.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

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
import torch.multiprocessing as mp
from torch import nn
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy, StateDictType

WORLD = 2
TIMEOUT_S = 180  # hang guard only; generous because the 2-core machine may be shared


def wrapped(seed):
    torch.manual_seed(seed)
    return FSDP(
        nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)),
        use_orig_params=True,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        device_id=torch.device("cpu"),
    )  # FSDP1 needs an explicit CPU device_id without an accelerator (None raises)


def local_tensors(sd):
    """This rank's shard of each entry of a LOCAL_STATE_DICT, as plain tensors."""
    out = {}
    for k, v in sd.items():
        if isinstance(v, ShardedTensor):
            shards = v.local_shards()
            v = shards[0].tensor if shards else torch.empty(0)
        out[k] = v.detach().clone()
    return out


def worker(rank, tmp):
    warnings.filterwarnings("ignore")  # FSDP1's deprecation warnings, on every call
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        model = wrapped(seed=0)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
        torch.manual_seed(100 + rank)
        model(torch.randn(3, 4)).sum().backward()
        optim.step()
        with FSDP.state_dict_type(model, StateDictType.LOCAL_STATE_DICT):
            sd = model.state_dict()
        saved = local_tensors(sd)
        fresh = wrapped(seed=1)  # different init, so a load that does nothing cannot pass
        res = {"saved_keys": sorted(sd)}
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    if "setup_error" not in res:
        try:
            with FSDP.state_dict_type(fresh, StateDictType.LOCAL_STATE_DICT):
                fresh.load_state_dict(sd)
                loaded = local_tensors(fresh.state_dict())
            res["load"] = "ok"
            res["equal"] = sorted(loaded) == sorted(saved) and all(
                loaded[k].shape == saved[k].shape and torch.equal(loaded[k], saved[k]) for k in saved
            )
        except Exception as exc:
            lines = str(exc).strip().splitlines()
            res["load"] = f"{type(exc).__name__}: {lines[0] if lines else ''}"
            res["offending"] = [ln.strip() for ln in lines[1:] if ln.strip()]
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    # No teardown: destroying the group after a rank raised can abort the process in gloo's
    # threads ("terminate called without an active exception"). The result is written; leave.
    os._exit(0)


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
    for r, res in enumerate(results):
        print(f"rank {r}: saved keys {res['saved_keys']}")
        print(f"rank {r}: load_state_dict -> {res['load']}")
        for line in res.get("offending", []):
            print(f"rank {r}:   {line}")
        if "equal" in res:
            print(f"rank {r}: loaded local shards equal the saved ones: {res['equal']}")
    failed = [r for r, res in enumerate(results) if res["load"] != "ok"]
    if failed:
        print(
            f"BUG PRESENT: LOCAL_STATE_DICT with use_orig_params=True: load_state_dict rejects the "
            f"dict state_dict wrote, on ranks {failed}"
        )
        return 1
    if not all(res["equal"] for res in results):
        print("ERROR: the dict loaded, but the local shards differ from the saved ones; cannot judge")
        return 2
    print("FIXED: LOCAL_STATE_DICT with use_orig_params=True round-trips, local shards equal")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

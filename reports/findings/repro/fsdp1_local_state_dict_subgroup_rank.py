"""FSDP1 LOCAL_STATE_DICT on a process group other than the world: state_dict() raises.

Bug: FSDP1 wrapping a module with process_group=<a sub-group> (FULL_SHARD, CPU, gloo, 4 ranks;
ranks {0, 2} and {1, 3}, as expert parallelism shards each expert on its expert-data-parallel
group). Under FSDP.state_dict_type(model, LOCAL_STATE_DICT), model.state_dict() raises on every
rank whose rank in the group differs from its global rank: _local_post_state_dict_hook
(torch/distributed/fsdp/_state_dict_utils.py) builds the ShardedTensor's shard with
Shard.from_tensor_and_offsets(..., fsdp_state.rank), the rank *within the group*, while a
ShardMetadata placement names a *global* rank (sharded_tensor/utils.py
_parse_and_validate_remote_device checks it against get_process_group_ranks): "Global rank 1
does not exist in input process group: [0, 2]" on rank 2, "Local shard metadata's rank does not
match with the rank in its process group! Found current rank in the process group: 3, local
ShardMetadata placement's rank: 1" on rank 3. SHARDED_STATE_DICT on the same model works (checked
here as the control), and so does LOCAL_STATE_DICT on the world group.

Correct behaviour: the local state dict of every rank, its shard placed on its global rank.

Seen on: torch 2.13.0+cpu and 2.11.0+cu130 (gloo, CPU, 4 ranks).
Upstream: not found. Related: https://github.com/pytorch/pytorch/pull/123230 made ShardedTensor
placements global ranks; https://github.com/pytorch/pytorch/pull/123778 fixed the same group-rank
mistake for HSDP's sharded state dict, not for LOCAL_STATE_DICT.

Run: python reports/findings/repro/fsdp1_local_state_dict_subgroup_rank.py
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
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy, StateDictType

WORLD = 4
TIMEOUT_S = 180  # hang guard only; generous because the 2-core machine may be shared


def state_dict_of(model, kind):
    try:
        with FSDP.state_dict_type(model, kind):
            model.state_dict()
        return "ok"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


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
        groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]  # every rank makes every group
        torch.manual_seed(0)
        res = {}
        for label, group in (("world", None), ("sub-group", groups[rank % 2])):
            model = FSDP(
                nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)),
                process_group=group,
                sharding_strategy=ShardingStrategy.FULL_SHARD,
                device_id=torch.device("cpu"),
            )  # FSDP1 needs an explicit CPU device_id
            model(torch.randn(3, 4)).sum().backward()
            res[label] = {
                "sharded": state_dict_of(model, StateDictType.SHARDED_STATE_DICT),
                "local": state_dict_of(model, StateDictType.LOCAL_STATE_DICT),
            }
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    # No teardown: after the ranks that raised left a collective half done, destroying the
    # group can abort the process in gloo's threads ("terminate called without an active
    # exception"). The result is written; leave at once.
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
        print(f"rank {r}: {res}")
    controls = [res["world"][k] for res in results for k in ("sharded", "local")]
    controls += [res["sub-group"]["sharded"] for res in results]
    if any(c != "ok" for c in controls):
        print("ERROR: a control (world group, or SHARDED_STATE_DICT on the sub-group) failed; cannot judge")
        return 2
    bad = {r: res["sub-group"]["local"] for r, res in enumerate(results) if res["sub-group"]["local"] != "ok"}
    if bad:  # a rank whose group rank is its global rank fails only because its peers left the collective
        print(f"BUG PRESENT: LOCAL_STATE_DICT state_dict() on a sub-group fails on ranks {sorted(bad)}")
        return 1
    print("FIXED: LOCAL_STATE_DICT state_dict() works on a sub-group on every rank")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

"""DCP load of an FSDP1 optimizer fails when one rank holds an empty shard.

Bug: with FSDP1 (FULL_SHARD) on 2 ranks and a model whose flat parameter has a single element
(nn.Linear(1, 1, bias=False)), torch.chunk leaves rank 1 with no rows. Saving
get_state_dict(model, optim) with torch.distributed.checkpoint.save works, but loading it back into
the state dict of a freshly built model+optimizer fails with
"Missing key in checkpoint state_dict: optim.param_groups".
The rank with no rows has no storage keys for its empty ShardedTensors, which triggers the pre-2.4
compatibility fallback in DefaultLoadPlanner.create_local_plan (added by
https://github.com/pytorch/pytorch/pull/134158); that fallback re-flattens the state dict with the old
rules and asks for optim.param_groups as a whole key, which the checkpoint does not have.

Correct behaviour: the load succeeds, exactly as it does for nn.Linear(2, 2) where every rank has rows
(printed as a control line).

Seen on: torch 2.13.0+cpu (gloo, CPU).
Upstream: not found as this failure path (likely new). Related empty-shard issues:
https://github.com/pytorch/pytorch/issues/108869 (closed),
https://github.com/pytorch/pytorch/issues/102821 (open),
https://github.com/pytorch/pytorch/issues/137327 (open).

Run: python reports/findings/repro/dcp_fsdp1_missing_param_groups_empty_rank.py
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
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy

WORLD = 2
TIMEOUT_S = 150  # hang guard only; the script normally takes ~15-30 s
CASES = {"Linear(2, 2)": (2, 2), "Linear(1, 1)": (1, 1)}  # control first, then the empty-shard case


def build(in_f, out_f):
    model = FSDP(
        nn.Linear(in_f, out_f, bias=False),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        device_id=torch.device("cpu"),  # FSDP1 needs an explicit CPU device_id without an accelerator
    )
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def case(in_f, out_f, ckpt_dir):
    """Save after one step, load into a fresh template. Returns (local numel, None or {rank: error})."""
    torch.manual_seed(0)
    model, optim = build(in_f, out_f)
    model(torch.randn(4, in_f)).sum().backward()
    optim.step()
    msd, osd = get_state_dict(model, optim)
    local_numel = sum(s.tensor.numel() for s in msd["weight"].local_shards())  # elements held on this rank
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt_dir)
    dist.barrier()
    fresh, fresh_optim = build(in_f, out_f)
    fmsd, fosd = get_state_dict(fresh, fresh_optim)
    try:
        dcp.load({"model": fmsd, "optim": fosd}, checkpoint_id=ckpt_dir)
        return local_numel, None
    except CheckpointException as e:  # a BaseException; failures maps failing rank -> (exc, trace)
        return local_numel, {str(r): f"{type(exc).__name__}: {exc}" for r, (exc, _) in e.failures.items()}


def worker(rank, tmp):  # an exception here reaches main() through ctx.join() and gives exit 2
    warnings.filterwarnings("ignore")  # ShardedTensor / process-group deprecation noise
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    dist.init_process_group("gloo", f"file://{tmp}/store", rank=rank, world_size=WORLD, timeout=timeout)
    res = {name: case(*shape, os.path.join(tmp, name)) for name, shape in CASES.items()}
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(res))
    # No teardown: after a rank raised inside a collective code path, destroying the group can
    # abort the process in gloo's threads ("terminate called without an active exception",
    # SIGABRT) before anything is written, and the script would say 2. Write, then leave at once.
    os._exit(0)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
        deadline = time.monotonic() + TIMEOUT_S
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"ranks did not finish within {TIMEOUT_S}s")
        results = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(WORLD)]
    numels = {name: [res[name][0] for res in results] for name in CASES}
    print(f"weight elements held per rank in the sharded state dict: {numels}")
    control_err = results[0]["Linear(2, 2)"][1]  # dcp.load raises the same exception on every rank
    print(f"control Linear(2, 2) (every rank has rows): {'load OK' if control_err is None else control_err}")
    if control_err is not None:
        print("ERROR: control case failed too; cannot judge")
        return 2
    failed = results[0]["Linear(1, 1)"][1]
    for r, err in (failed or {}).items():
        n = numels["Linear(1, 1)"][int(r)]
        print(f"BUG PRESENT: Linear(1, 1) dcp.load failed on rank {r} (holding {n} elements): {err}")
    if failed:
        return 1
    print("FIXED: Linear(1, 1) checkpoint loaded on all ranks")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

"""FSDP1 FULL_STATE_DICT with offload_to_cpu=True crashes on a CPU-only run.

Bug: FSDP1 (FULL_SHARD, CPU, gloo, 2 ranks), model.state_dict() inside
FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=True))
(rank0_only=False). With use_orig_params=True the ranks are killed by SIGSEGV (both ranks, as seen here);
with use_orig_params=False the ranks raise "RuntimeError: setStorage: ... out of bounds for storage of
size 0" (both ranks, as seen here). Per the upstream issue, FlatParamHandle.to_cpu()
(torch/distributed/fsdp/_flat_param.py) frees the padded unsharded flat parameter even when it already
is on CPU, where .to("cpu") made no copy, so the views handed out use freed storage. Each case runs in
its own spawned world; the parent watches exit codes, so a segfaulting rank (or a peer left waiting in a
collective) cannot hang it.

Correct behaviour: both ranks return the full state dict, equal (torch.equal) to the one returned with
offload_to_cpu=False, which is taken first as a control.

Seen on: torch 2.13.0+cpu (gloo, CPU, 2 ranks).
Upstream: https://github.com/pytorch/pytorch/issues/188989 (closed), fixed by
https://github.com/pytorch/pytorch/pull/188990 (merged 2026-07-09, after 2.13.0); Lightning:
https://github.com/Lightning-AI/pytorch-lightning/issues/21804.

Run: python reports/findings/repro/fsdp1_full_offload_cpu_crash.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import datetime
import json
import os
import signal
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.fsdp import FullStateDictConfig, ShardingStrategy, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

WORLD = 2
TIMEOUT_S = 120  # per world; hang guard only, generous because the 2-core machine may be shared
GRACE_S = 20  # once one rank has exited, how long to wait for the others before killing them


def full_sd(model, offload):
    with FSDP.state_dict_type(
        model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=offload)
    ):
        return {k: v.detach().clone() for k, v in model.state_dict().items()}


def worker(rank, tmp, use_orig_params):
    out = os.path.join(tmp, f"rank{rank}.json")
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S // 2),
        )
        torch.manual_seed(0)
        model = FSDP(
            nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)),
            use_orig_params=use_orig_params,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            device_id=torch.device("cpu"),
        )
        control = full_sd(model, offload=False)
    except Exception:
        with open(out, "w") as f:
            json.dump({"setup_error": traceback.format_exc()}, f)
        return
    try:
        sd = full_sd(model, offload=True)  # the SIGSEGV, if any, happens in here
        res = {"ok": sorted(sd) == sorted(control) and all(torch.equal(sd[k], control[k]) for k in control)}
    except Exception as e:
        res = {"error": f"{type(e).__name__}: {e}".replace("\n", " ")[:300]}
    with open(out, "w") as f:
        json.dump(res, f)
    if "ok" in res:
        dist.destroy_process_group()


def run_world(use_orig_params):
    """Returns (exit codes, per-rank results or None) for one spawned world."""
    tmp = tempfile.mkdtemp()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, tmp, use_orig_params)) for r in range(WORLD)]
    for p in procs:
        p.start()
    start, first_exit = time.monotonic(), None
    while any(p.is_alive() for p in procs):
        now = time.monotonic()
        if first_exit is None and any(not p.is_alive() for p in procs):
            first_exit = now
        if now - start > TIMEOUT_S or (first_exit is not None and now - first_exit > GRACE_S):
            break
        time.sleep(0.5)
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join()
    return [p.exitcode for p in procs], [read(os.path.join(tmp, f"rank{r}.json")) for r in range(WORLD)]


def read(path):
    if not os.path.exists(path):
        return None  # the rank died (or was killed) before writing its result
    with open(path) as f:
        return json.load(f)


def describe(codes, results):
    return "; ".join(
        f"rank {r}: {f'killed by {signal.Signals(-c).name}' if c is not None and c < 0 else f'exit {c}'}, "
        f"result {res}"
        for r, (c, res) in enumerate(zip(codes, results))
    )


def main():
    verdicts = {}
    for uop in (True, False):
        codes, results = run_world(uop)
        print(f"use_orig_params={uop}: {describe(codes, results)}")
        if any(res and "setup_error" in res for res in results):
            print(next(res["setup_error"] for res in results if res and "setup_error" in res))
            return 2
        segv = [r for r, c in enumerate(codes) if c == -signal.SIGSEGV]
        oob = [
            r for r, res in enumerate(results) if res and "out of bounds for storage" in res.get("error", "")
        ]
        if segv or oob:
            verdicts[uop] = f"use_orig_params={uop}: " + ", ".join(
                [f"rank {r} killed by SIGSEGV" for r in segv]
                + [f"rank {r} raised {results[r]['error']}" for r in oob]
            )
        elif all(res and res.get("ok") for res in results) and codes == [0] * WORLD:
            verdicts[uop] = None
        else:
            verdicts[uop] = "unexpected"
    bugs = [v for v in verdicts.values() if v and v != "unexpected"]
    if bugs:
        print("BUG PRESENT: FULL_STATE_DICT offload_to_cpu=True on CPU: " + "; ".join(bugs))
        return 1
    if "unexpected" in verdicts.values():
        print("ERROR: a world failed in a way other than the known bug; cannot judge")
        return 2
    print("FIXED: offloaded full state dict equals the non-offloaded one on both ranks, both use_orig_params")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

"""Fabric sharded checkpoint load does not restore stateful objects such as an LR scheduler.

Bug: fabric.save(path, {"model", "optimizer", "scheduler"}) with a sharded checkpoint stores
scheduler.state_dict() in the metadata file, but the sharded branch of load_checkpoint then does
`state[key] = metadata.pop(key)` for every non-module/optimizer key (lightning/fabric/strategies/
model_parallel.py ~L460; same code in fsdp.py ~L596 for FSDPStrategy(state_dict_type="sharded")). The fresh
scheduler never gets load_state_dict(): it keeps last_epoch 0 and the initial LR, and state["scheduler"] is
replaced by the saved plain dict, so a resumed run silently restarts its LR schedule.

Correct behaviour: like the full-checkpoint branch (printed as a control), which uses _move_state_into() and
calls load_state_dict() on stateful objects, the fresh scheduler's state_dict() equals the saved one.

Fabric refuses FSDPStrategy on CPU ("FSDP is only available on GPU"), so this uses ModelParallelStrategy
with an FSDP2 fully_shard parallelize_fn (data_parallel_size=2), 2 CPU processes, gloo. (The FSDPStrategy
sharded path gave the same result when the CPU check was bypassed with a subclass and a pre-wrapped
FSDP1 module; that workaround is not included here.)

Seen on: torch 2.13.0+cpu, lightning 2.6.6. Upstream: not found (likely new).
Run: python reports/findings/repro/fabric_sharded_load_skips_scheduler.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import json
import os
import socket
import sys
import tempfile
import time
import traceback

import torch
import torch.multiprocessing as mp
from torch import nn

WORLD = 2
TIMEOUT_S = 80


def parallelize_fn(model, device_mesh):
    from torch.distributed.fsdp import fully_shard

    return fully_shard(model, mesh=device_mesh["data_parallel"])


def build(fabric):
    model = fabric.setup_module(nn.Linear(4, 4))
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.1))
    return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


def case(path, sharded):
    """Train 2 steps, save, load into fresh objects. Returns saved/fresh scheduler state dicts."""
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import ModelParallelStrategy

    strategy = ModelParallelStrategy(
        parallelize_fn, data_parallel_size=WORLD, tensor_parallel_size=1, save_distributed_checkpoint=sharded
    )
    fabric = Fabric(accelerator="cpu", devices=WORLD, strategy=strategy)
    fabric.launch()
    torch.manual_seed(0)
    model, optimizer, scheduler = build(fabric)
    for _ in range(2):
        fabric.backward(model(torch.randn(2, 4)).sum())
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    fabric.save(path, {"model": model, "optimizer": optimizer, "scheduler": scheduler})
    fresh_model, fresh_opt, fresh_sched = build(fabric)
    state = {"model": fresh_model, "optimizer": fresh_opt, "scheduler": fresh_sched}
    before = fresh_sched.state_dict()
    fabric.load(path, state)
    after, entry_type = fresh_sched.state_dict(), type(state["scheduler"]).__name__
    return {"saved": scheduler.state_dict(), "before": before, "after": after, "entry_type": entry_type}


def worker(rank, tmp, port):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(WORLD))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        res = {
            "full": case(os.path.join(tmp, "full.ckpt"), sharded=False),
            "sharded": case(os.path.join(tmp, "sharded_ckpt"), sharded=True),
        }
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f, default=repr)
    # No teardown: gloo's threads can abort the process as it exits ("terminate called without an
    # active exception", SIGABRT) after the result is written; leave at once.
    os._exit(0)


def main():
    tmp = tempfile.mkdtemp()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.start_processes(worker, args=(tmp, port), nprocs=WORLD, join=False, start_method="spawn")
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
    for kind in ("full", "sharded"):
        res = results[0][kind]
        print(f"[{kind}] saved StepLR state:        {res['saved']}")
        print(f"[{kind}] fresh StepLR after load:  {res['after']} (state['scheduler']: {res['entry_type']})")
        if any(rr[kind]["saved"] == rr[kind]["before"] for rr in results):
            print("ERROR: saved and fresh scheduler states are identical; the test cannot tell them apart")
            return 2
    if any(rr["full"]["after"] != rr["full"]["saved"] for rr in results):
        print("ERROR: control (full checkpoint) did not restore the scheduler either; cannot judge")
        return 2
    bad = [r for r, rr in enumerate(results) if rr["sharded"]["after"] != rr["sharded"]["saved"]]
    if bad:
        res = results[bad[0]]["sharded"]
        print(
            f"BUG PRESENT: sharded fabric.load left the fresh StepLR unrestored on ranks {bad}: "
            f"last_epoch={res['after']['last_epoch']} _last_lr={res['after']['_last_lr']} "
            f"(saved last_epoch={res['saved']['last_epoch']} _last_lr={res['saved']['_last_lr']}); "
            f"state['scheduler'] was replaced by a {res['entry_type']} (full-checkpoint control restores it)"
        )
        return 1
    print("FIXED: sharded fabric.load restored the saved StepLR state into the fresh scheduler on all ranks")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

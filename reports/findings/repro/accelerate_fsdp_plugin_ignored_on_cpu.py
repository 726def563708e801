"""Accelerate silently ignores an FSDP plugin on a multi-process CPU run and wraps the model in DDP.

Bug: in a 2-process CPU/gloo world (env vars as torchrun / `accelerate launch --cpu` set them), building
Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin()) - or Accelerator() with
ACCELERATE_USE_FSDP=true and ACCELERATE_USE_CPU=true - gives distributed_type MULTI_CPU, and
accelerator.prepare(model) returns a DistributedDataParallel model, not FSDP. No warning or log record
says the FSDP plugin was ignored. accelerate/state.py (~L986-1013) switches distributed_type to FSDP only
for MULTI_GPU/NPU/XPU-like types, so MULTI_CPU never becomes FSDP. A user asking for sharding gets full
replicas and DDP-format checkpoints without being told.

Correct behaviour: either the model is sharded with FSDP (FSDP works on CPU with gloo), or Accelerator
raises / warns that the FSDP plugin is not used on CPU.

Seen on: torch 2.13.0+cpu, accelerate 1.15.0. Upstream: not found (likely new).
Run: python reports/findings/repro/accelerate_fsdp_plugin_ignored_on_cpu.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import json
import logging
import os
import socket
import sys
import tempfile
import time
import traceback
import warnings

import torch.multiprocessing as mp
from torch import nn

WORLD = 2
TIMEOUT_S = 60
ROUTES = {
    "plugin": "Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())",
    "env": "Accelerator() with ACCELERATE_USE_FSDP=true ACCELERATE_USE_CPU=true",
}


class Records(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(f"{record.name}: {record.getMessage()}")


def worker(rank, tmp, port, route):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD))
    os.environ.update(LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ["OMP_NUM_THREADS"] = "1"  # avoids accelerate's unrelated OMP_NUM_THREADS warning
    if route == "env":
        os.environ.update(ACCELERATE_USE_FSDP="true", ACCELERATE_USE_CPU="true")
    handler = Records()
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        from accelerate import Accelerator, FullyShardedDataParallelPlugin

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if route == "plugin":
                accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
            else:
                accelerator = Accelerator()
            model = accelerator.prepare(nn.Linear(4, 4))
        msgs = [f"{w.category.__name__}: {w.message}" for w in caught] + handler.messages
        res = {
            "distributed_type": str(accelerator.distributed_type),
            "num_processes": accelerator.num_processes,
            "model_type": type(model).__name__,
            "fsdp_msgs": [m for m in msgs if "fsdp" in m.lower() or "fully shard" in m.lower()],
            "n_msgs": len(msgs),
        }
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"{route}_rank{rank}.json"), "w") as f:
        json.dump(res, f)


def run_route(route):
    tmp = tempfile.mkdtemp()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.start_processes(worker, args=(tmp, port, route), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            raise TimeoutError(f"route {route!r}: ranks did not finish within {TIMEOUT_S}s")
    results = []
    for r in range(WORLD):
        with open(os.path.join(tmp, f"{route}_rank{r}.json")) as f:
            results.append(json.load(f))
    return results


def main():
    silent_ddp = []
    for route, desc in ROUTES.items():
        results = run_route(route)
        for r, res in enumerate(results):
            if "setup_error" in res:
                print(f"route {route!r} rank {r} setup failure:\n{res['setup_error']}")
                return 2
            print(
                f"[{route}] rank {r}: distributed_type={res['distributed_type']} "
                f"num_processes={res['num_processes']} prepare() -> {res['model_type']}; "
                f"{res['n_msgs']} warnings/log records, FSDP-related: {res['fsdp_msgs']}"
            )
        if all(res["model_type"] == "DistributedDataParallel" and not res["fsdp_msgs"] for res in results):
            silent_ddp.append(f"{desc} -> {results[0]['distributed_type']}, {results[0]['model_type']}")
    if silent_ddp:
        print(
            f"BUG PRESENT: FSDP requested on a {WORLD}-process CPU/gloo run but prepare() returned DDP with no "
            f"warning mentioning FSDP: {'; '.join(silent_ddp)}"
        )
        return 1
    print("FIXED: the FSDP request on CPU is honoured (FSDP model) or reported (warning/error)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

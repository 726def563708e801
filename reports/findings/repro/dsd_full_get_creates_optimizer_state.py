"""get_state_dict(full_state_dict=True) creates optimizer state on an FSDP1 rank that holds no elements.

Bug: FSDP1, use_orig_params=True, 2 ranks, nn.Linear(1, 1, bias=False): rank 1's shard of the weight is
empty, so after a step with SGD(momentum=0.9) rank 1's optim.state is empty (its grad is None). The read
get_state_dict(model, optim, options=StateDictOptions(full_state_dict=True)) then leaves a new entry in
rank 1's live optim.state (momentum_buffer of shape [0]; Adam: step, exp_avg, exp_avg_sq): saving a
checkpoint changes the live training state it was meant to capture. Mechanism (from the 2.13 source):
_get_optim_state_dict calls _init_optim_state, which, when optim.state is empty and no param has a grad,
sets zero grads and runs optim.step() with lr=0 -- on the empty-shard rank that creates the state.
The default (sharded) StateDictOptions() shows the same change (checked separately; not run here).

Correct behaviour: get_state_dict does not change optim.state on any rank (same params, same keys, equal
values before and after).

Seen on: torch 2.13.0+cpu (gloo, CPU). Adam is checked alongside SGD and shows the same.
Variant not run here: cpu_offload=CPUOffload(offload_params=True) cannot start on a CPU-only machine
(pin_memory needs an accelerator).
Upstream: https://github.com/pytorch/pytorch/issues/164929 (open) reports get_optimizer_state_dict
changing a fresh optimizer's state; the empty-shard trigger here is not mentioned. Related
empty-shard issues:
https://github.com/pytorch/pytorch/issues/108869 (closed),
https://github.com/pytorch/pytorch/issues/102821 (open),
https://github.com/pytorch/pytorch/issues/137327 (open).

Run: python reports/findings/repro/dsd_full_get_creates_optimizer_state.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import datetime
import json
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

WORLD = 2
TIMEOUT_S = 150  # hang guard only; the script normally takes ~15-30 s


def snapshot(optim):
    """{param index: {state key: cloned value}} in param_groups order."""
    params = [p for g in optim.param_groups for p in g["params"]]
    return {
        i: {k: v.clone() if torch.is_tensor(v) else v for k, v in optim.state[p].items()}
        for i, p in enumerate(params)
        if p in optim.state
    }


def same(a, b):
    if a.keys() != b.keys() or any(a[i].keys() != b[i].keys() for i in a):
        return False
    eq = [torch.equal(x, b[i][k]) if torch.is_tensor(x) else x == b[i][k] for i in a for k, x in a[i].items()]
    return all(eq) and all(type(x) is type(b[i][k]) for i in a for k, x in a[i].items())


def describe(snap):
    return {
        i: {k: f"tensor{list(v.shape)}" if torch.is_tensor(v) else repr(v) for k, v in s.items()}
        for i, s in snap.items()
    }


def case(optim_cls, **kw):
    torch.manual_seed(0)
    model = FSDP(nn.Linear(1, 1, bias=False), use_orig_params=True, device_id=torch.device("cpu"))
    optim = optim_cls(model.parameters(), lr=0.1, **kw)
    model(torch.randn(4, 1)).sum().backward()
    optim.step()
    before = snapshot(optim)
    get_state_dict(model, optim, options=StateDictOptions(full_state_dict=True))  # a read
    after = snapshot(optim)
    numel = sum(p.numel() for p in model.parameters())
    return {"numel": numel, "before": describe(before), "after": describe(after), "same": same(before, after)}


def worker(rank, tmp):  # an exception here reaches main() through ctx.join() and gives exit 2
    warnings.filterwarnings("ignore")  # ShardedTensor / process-group deprecation noise
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    dist.init_process_group("gloo", f"file://{tmp}/store", rank=rank, world_size=WORLD, timeout=timeout)
    res = {"SGD": case(torch.optim.SGD, momentum=0.9), "Adam": case(torch.optim.Adam)}
    dist.destroy_process_group()
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(res))


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
    bugs = []
    for name in ("SGD", "Adam"):
        for r, res in enumerate(results):
            c = res[name]
            line = (
                f"{name} rank {r} (holds {c['numel']} elements): optim.state before get_state_dict "
                f"{c['before']}, after {c['after']}"
            )
            print(line)
            if not c["same"]:
                bugs.append(line)
    for b in bugs:
        print(f"BUG PRESENT: get_state_dict(full_state_dict=True) changed live optim.state: {b}")
    if bugs:
        return 1
    print("FIXED: get_state_dict(full_state_dict=True) left optim.state unchanged on every rank")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

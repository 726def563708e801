"""FSDP1 over tensor parallelism (a 2-D (dp, tp) mesh): loading a sharded optimizer state dict
puts other ranks' values into the tensor-parallel shards, silently (use_orig_params=True), or
refuses it (use_orig_params=False).

Setup, as PyTorch's own 2-D FSDP1 tests build it (test_fsdp_2d_parallel.py): an MLP whose fc1 is
ColwiseParallel and fc2 RowwiseParallel on mesh["tp"], then FullyShardedDataParallel with
device_mesh=mesh["dp"] (FULL_SHARD, device_id cpu, ModuleWrapPolicy({nn.Linear})) on a (2, 2)
mesh of 4 gloo ranks; AdamW; one step. The optimizer state is taken with FSDP.optim_state_dict
under StateDictType.SHARDED_STATE_DICT (its tensors DTensors over the 2-D mesh), kept in memory,
and loaded into a second model's optimizer with FSDP.optim_state_dict_to_load and
optimizer.load_state_dict, as documented.

Bug: on load, _shard_orig_param_state (torch/distributed/fsdp/_optim_utils.py) makes each state
DTensor whole over both mesh dimensions (_gather_state_dict), then cuts it with the offsets of
this rank's *tensor-parallel local* piece: with use_orig_params=True, fc1's state on tensor-parallel
rank 1 comes back as rank 0's, fc2.weight's (split on columns) as a mixture of both, no error; with
use_orig_params=False the flat path refuses ("Tensor optimizer state does not have same shape as
its parameter"). get/set_optimizer_state_dict take the same path. The parameters round-trip; a
(2, 1) mesh (no tensor parallelism) round-trips the optimizer state too: the control here.

Correct behaviour: every rank's optimizer state after the load bitwise what it was at the save.

Seen on: torch 2.13.0+cpu and 2.15.0 (its CUDA build on the CPU); gloo, 4 ranks.
Upstream: not found (searched issues and PRs). The 2-D optimizer path came with
https://github.com/pytorch/pytorch/pull/111774 ("[2D] Enable 2D optimizer get_state_dict()");
PyTorch's test_2d_optim_state_dict compares the state it had before the load (4 GPUs), so it
cannot see this.

Run: python reports/findings/repro/fsdp1_2d_optim_state_gathered_over_tp.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import copy
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

WORLD = 4
TIMEOUT_S = 180  # hang guard only; generous because the 2-core machine may be shared


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def build(seed, mesh, orig):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(seed)
    model = MLP()
    if mesh["tp"].size() > 1:
        model = parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    model = FSDP(
        model,
        device_mesh=mesh["dp"],
        device_id=torch.device("cpu"),
        use_orig_params=orig,
        auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
    )
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def train(model, optim, seed):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(seed))
    model(x).pow(2).mean().backward()
    optim.step()
    optim.zero_grad()


def state(model, optim):
    names = {p: n.replace("_fsdp_wrapped_module.", "") for n, p in model.named_parameters()}
    return {
        f"{names[p]}/{k}": v.clone() for p, s in optim.state.items() for k, v in s.items() if v.dim() > 0
    }


def round_trip(rank, shape, orig):
    """'ok', 'differs: [...]' or the load's error, on this rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    model, optim = build(0, mesh, orig)
    train(model, optim, 100 + rank // shape[1])  # the ranks of one tensor-parallel group: one batch
    before = state(model, optim)
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        saved = copy.deepcopy(FSDP.optim_state_dict(model, optim))
    model2, optim2 = build(1, mesh, orig)
    train(model2, optim2, 200 + rank // shape[1])  # other values, to be replaced by the load
    try:
        with FSDP.state_dict_type(model2, StateDictType.SHARDED_STATE_DICT):
            optim2.load_state_dict(FSDP.optim_state_dict_to_load(model2, optim2, saved))
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    after = state(model2, optim2)
    bad = sorted(k for k in before if k not in after or not torch.equal(before[k], after[k]))
    return f"differs: {bad}" if bad else "ok"


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
        res = {
            "2x2 use_orig_params": round_trip(rank, (2, 2), True),
            "2x2 flat": round_trip(rank, (2, 2), False),
            "4x1 use_orig_params (control)": round_trip(rank, (4, 1), True),
        }
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    # No teardown: a rank that raised may have left a collective half done; destroying the
    # group can then abort the process in gloo's threads. The result is written; leave at once.
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
    if any(res["4x1 use_orig_params (control)"] != "ok" for res in results):
        print("ERROR: the control (a (4, 1) mesh, no tensor parallelism) did not round-trip; cannot judge")
        return 2
    bad = {
        label: sorted(r for r, res in enumerate(results) if res[label] != "ok")
        for label in ("2x2 use_orig_params", "2x2 flat")
    }
    if any(bad.values()):
        print(f"BUG PRESENT: the 2-D optimizer state does not round-trip (ranks per variant): {bad}")
        return 1
    print("FIXED: the 2-D optimizer state round-trips bitwise on every rank")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

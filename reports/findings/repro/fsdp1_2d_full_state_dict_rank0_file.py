"""FSDP1 over tensor parallelism (a (dp, tp) mesh, use_orig_params=True): the FULL_STATE_DICT
recipe, torch.save of rank 0's state dict and a load on every rank, silently gives tensor-parallel
rank 1 rank 0's weights, and the optimizer load raises on the other data-parallel replica.

Setup: an MLP (fc1 ColwiseParallel, fc2 RowwiseParallel, fc3 whole) on mesh["tp"], then
FullyShardedDataParallel(device_mesh=mesh["dp"], use_orig_params=True, ModuleWrapPolicy({nn.Linear}),
device_id cpu) on a (2, 2) mesh of 4 gloo ranks; AdamW; one step. Under
FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT): model.state_dict() and
FSDP.optim_state_dict, torch.save on rank 0, torch.load on every rank, model.load_state_dict and
optim.load_state_dict(FSDP.optim_state_dict_to_load(...)): the recipe FSDP1 documents.

Bug: on a 2-D mesh the "full" state dict is whole along dp only (a maintainer in
https://github.com/pytorch/pytorch/issues/120722): fc1 and fc2 come out as DTensors holding this
rank's tensor-parallel piece, so rank 0's file holds tp rank 0's pieces (and rank 0's DeviceMesh).
Loading it, model.load_state_dict copies tp rank 0's pieces into the tp rank 1 ranks without an
error, and FSDP.optim_state_dict_to_load raises on the other dp replica ("Could not resolve the
process group registered under the name 3": the group rank 0's mesh names is another group there).
Nothing refuses at the save. The optimizer state's DTensors are cloned before torch.save
(dtensor_offset_view_torch_save.py shows why). Control: the same recipe without the tensor-parallel
plan round-trips bitwise.

Correct behaviour: a full state dict that is whole, or a save that refuses.

Seen on: torch 2.13.0+cpu and 2.15.0 (its CUDA build on the CPU); gloo, 4 ranks.
Upstream: https://github.com/pytorch/pytorch/issues/120722 and
https://github.com/pytorch/pytorch/issues/121062 (closed: FULL_STATE_DICT allowed for 2-D, PRs
120837 and 121250 removed the guard); nothing reports the silent copy or the unresolvable group.

Run: python reports/findings/repro/fsdp1_2d_full_state_dict_rank0_file.py
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

WORLD = 4
TIMEOUT_S = 240  # hang guard only; generous because the 2-core machine may be shared


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(13, 24), nn.Linear(24, 7), nn.Linear(7, 5)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def build(seed, mesh, tp):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(seed)
    model = MLP()
    if tp:
        model = parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    model = FSDP(
        model,
        device_mesh=mesh["dp"],
        device_id=torch.device("cpu"),
        use_orig_params=True,
        auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
    )
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def train(model, optim, seed):
    x = torch.randn(4, 13, generator=torch.Generator().manual_seed(seed))
    model(x).pow(2).mean().backward()
    optim.step()
    optim.zero_grad()


def local(t):
    from torch.distributed.tensor import DTensor

    return (t.to_local() if isinstance(t, DTensor) else t).clone()


def model_state(model):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType

    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        return {k: local(v) for k, v in model.state_dict().items()}


def round_trip(rank, tmp, tp):
    """(what raised, model keys that differ) on this rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):  # a rank left in a collective by raising peers: freed, to report
        dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=10), mesh.get_group(dim))
    model, optim = build(0, mesh, tp)
    train(model, optim, 100 + rank // 2)  # the ranks of one tensor-parallel group: one batch
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        ckpt = {"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optim)}
    path = os.path.join(tmp, f"full-{int(tp)}.pt")
    if rank == 0:
        ckpt["optim"]["state"] = {
            n: {k: v.clone() for k, v in s.items()} for n, s in ckpt["optim"]["state"].items()
        }
        torch.save(ckpt, path)
    dist.barrier()
    before = model_state(model)
    loaded = torch.load(path, weights_only=False)
    model2, optim2 = build(1, mesh, tp)
    train(model2, optim2, 200 + rank // 2)  # other values, to be replaced by the load
    raised = ""
    try:
        with FSDP.state_dict_type(model2, StateDictType.FULL_STATE_DICT):
            model2.load_state_dict(loaded["model"])
    except Exception as exc:
        raised = f"model.load_state_dict: {type(exc).__name__}: {str(exc)[:150]}"
    after = model_state(model2) if not raised else {}
    differs = sorted(k for k in before if k in after and not torch.equal(before[k], after[k]))
    if not raised:
        try:
            with FSDP.state_dict_type(model2, StateDictType.FULL_STATE_DICT):
                optim2.load_state_dict(FSDP.optim_state_dict_to_load(model2, optim2, loaded["optim"]))
        except Exception as exc:
            raised = f"optim_state_dict_to_load: {type(exc).__name__}: {str(exc)[:150]}"
    return raised, differs


def worker(rank, tmp):
    warnings.filterwarnings("ignore")
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        res = {"control (no TP)": round_trip(rank, tmp, False), "FSDP1 over TP": round_trip(rank, tmp, True)}
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
        print(f"rank {r} (dp {r // 2}, tp {r % 2}): {res}")
    if any(res["control (no TP)"] != ["", []] for res in results):
        print(
            "ERROR: the control (the same recipe without tensor parallelism) did not round-trip; cannot judge"
        )
        return 2
    bad = {r: res["FSDP1 over TP"] for r, res in enumerate(results) if res["FSDP1 over TP"] != ["", []]}
    if bad:
        print(f"BUG PRESENT: rank 0's FULL_STATE_DICT file does not load back on ranks {sorted(bad)}")
        return 1
    print("FIXED: rank 0's FULL_STATE_DICT file loads back bitwise on every rank")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

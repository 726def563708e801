"""get_state_dict of FSDP1 over tensor parallelism with flat parameters raises on the ranks whose
data-parallel group lacks global rank 0: "Global rank 0 is not part of group".

Setup: an MLP (fc1 ColwiseParallel, fc2 RowwiseParallel, fc3 whole) on mesh["tp"], then
FullyShardedDataParallel(device_mesh=mesh["dp"], use_orig_params=False, FULL_SHARD,
ModuleWrapPolicy({nn.Linear}), device_id cpu) on a (2, 2) mesh of 4 gloo ranks; AdamW; one step;
then get_state_dict(model, optim) (torch.distributed.checkpoint.state_dict), as documented.

Bug: DSD hands FSDP1's optimizer state dict the FSDP process group (the dp group), and
_map_param_key_to_optim_keys (torch/distributed/fsdp/_optim_utils.py) broadcasts with
broadcast_object_list(..., src=0, group=group): src is a global rank, and the dp group {1, 3}
does not hold global rank 0, so ranks 1 and 3 raise; ranks 0 and 2 are left in a collective (a
short timeout on the mesh's groups frees them here). The same code on a (4, 1) mesh, where the one
dp group holds rank 0, gets its state dict (the control).

Correct behaviour: every rank gets its state dict.

Seen on: torch 2.13.0+cpu and 2.15.0 (its CUDA build on the CPU); gloo, 4 ranks.
Upstream: https://github.com/pytorch/pytorch/issues/155680 (open): "optimizer_state_dict fails if
FSDP model is not on global rank 0", the same src=0 broadcast; DSD passing the FSDP group along
(https://github.com/pytorch/pytorch/issues/180449) makes every 2-D FSDP1 model with flat
parameters meet it.

Run: python reports/findings/repro/dsd_fsdp1_2d_flat_broadcast_src.py
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


def get_state(rank, shape):
    """'ok' when get_state_dict returns on this rank, else its error."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):  # a rank left in a collective by raising peers: freed, to report
        dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=10), mesh.get_group(dim))
    torch.manual_seed(0)
    model = MLP()
    if shape[1] > 1:
        model = parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    model = FSDP(
        model,
        device_mesh=mesh["dp"],
        device_id=torch.device("cpu"),
        use_orig_params=False,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
    )
    optim = torch.optim.AdamW(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(100 + rank // shape[1])  # one batch per tensor-parallel group
    x, y = torch.randn(4, 13, generator=gen), torch.randn(4, 5, generator=gen)
    nn.functional.mse_loss(model(x), y).backward()
    optim.step()
    try:
        get_state_dict(model, optim)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return "ok"


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
        res = {"control (4, 1)": get_state(rank, (4, 1)), "(2, 2)": get_state(rank, (2, 2))}
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    # No teardown: the ranks that raised left collectives half done; destroying the groups can
    # abort the process in gloo's threads. The result is written; leave at once.
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
    if any(res["control (4, 1)"] != "ok" for res in results):
        print("ERROR: the control (a (4, 1) mesh) did not get its state dict; cannot judge")
        return 2
    bad = {r: res["(2, 2)"] for r, res in enumerate(results) if res["(2, 2)"] != "ok"}
    if any("is not part of group" in v for v in bad.values()):
        print(f"BUG PRESENT: get_state_dict on the (2, 2) mesh fails on ranks {sorted(bad)}")
        return 1
    if bad:
        print(f"ERROR: get_state_dict failed otherwise: {bad}")
        return 2
    print("FIXED: get_state_dict works on every rank of the (2, 2) mesh")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

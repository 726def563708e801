"""FSDP1 HYBRID_SHARD on a (R, 1) device mesh: the replicas never synchronise their gradients.

Bug: FSDP1 (FullyShardedDataParallel, CPU, gloo, 2 ranks) with sharding_strategy=HYBRID_SHARD (or
_HYBRID_SHARD_ZERO2) and device_mesh=init_device_mesh("cpu", (2, 1), ("replicate", "shard")).
_init_process_group_state_for_hybrid_shard (torch/distributed/fsdp/_init_utils.py) takes the shard
group from mesh dim 1 (a correct size-1 group, {r}) and the replicate group from mesh dim 0 ({0, 1}).
_init_core_state then sees state.world_size == 1 (the *shard* group's size) and clamps the strategy
to NO_SHARD ("FSDP is switching to use `NO_SHARD` ... since the world size is 1"). NO_SHARD reduces
gradients with _reduce_grad_no_shard: one all-reduce over state.process_group, the size-1 shard
group; the all-reduce over state._inter_node_pg (replicate dim) exists only on the HYBRID path of
_reduce_grad, which is no longer taken. The gradient pre-divide factor was still computed for the
full data-parallel size (shard 1 x replicate 2), so each rank steps with its *own* gradient / 2 and
the replicas diverge silently. Each rank's flat parameter does hold the whole model (no sharding),
as it should; that part is correct.

Knock-on (torch 2.13 only): torch.distributed.checkpoint.state_dict.get_state_dict with
use_orig_params=False raises "Global rank 0 is not part of group" on rank 1, because
_get_fsdp_process_group (checkpoint/state_dict.py) no longer sees a hybrid strategy and passes the
size-1 shard group to FSDP.optim_state_dict, whose _map_param_key_to_optim_keys
(fsdp/_optim_utils.py) broadcasts with src=0 (a global rank). Printed as an extra line only.

Correct behaviour: the same as the controls, HYBRID_SHARD on a (1, 2) mesh and NO_SHARD on the world
group: after one SGD step on different per-rank batches both ranks hold identical parameters, equal
to a single-process step on the averaged gradient (checked here against that reference).

Seen on: torch 2.13.0+cpu and 2.11.0+cu130 (gloo, CPU, 2 ranks).
Upstream: https://github.com/pytorch/pytorch/issues/154888 ("Potential Bug with HYBRID_SHARD and
(n, 1) Device Mesh Falling Back to NO_SHARD"; per later references acknowledged as a bug and closed
as not planned, FSDP1 being in maintenance mode). Not documented as unsupported in the FSDP1
docstring.

Run: python reports/findings/repro/fsdp1_hybrid_shard_size1_shard_dim.py
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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

WORLD = 2
TIMEOUT_S = 180  # hang guard only; generous because the machine may be shared
LR = 0.1
TOL = 1e-5

# label -> (strategy, mesh shape or None for the world group, is_bug_case)
CASES = {
    "HYBRID_SHARD (2,1)": (ShardingStrategy.HYBRID_SHARD, (2, 1), True),
    "_HYBRID_SHARD_ZERO2 (2,1)": (ShardingStrategy._HYBRID_SHARD_ZERO2, (2, 1), True),
    "control HYBRID_SHARD (1,2)": (ShardingStrategy.HYBRID_SHARD, (1, 2), False),
    "control NO_SHARD world": (ShardingStrategy.NO_SHARD, None, False),
}


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(13, 24)
        self.fc2 = nn.Linear(24, 7)
        self.fc3 = nn.Linear(7, 5)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def batch(r):
    return torch.randn(8, 13, generator=torch.Generator().manual_seed(100 + r))  # differs per rank


def loss_fn(model, x):
    return model(x).pow(2).mean()


def reference(init):
    """One SGD step on the mean of the per-rank gradients, in one process."""
    ref = MLP()
    ref.load_state_dict(init)
    sum(loss_fn(ref, batch(r)) for r in range(WORLD)).div(WORLD).backward()
    torch.optim.SGD(ref.parameters(), lr=LR).step()
    return {k: v.detach() for k, v in ref.state_dict().items()}


def full_params(model):
    """This rank's full (unsharded) parameters, under their original names."""
    with FSDP.summon_full_params(model):
        return {
            n.replace("_fsdp_wrapped_module.", ""): p.detach().clone()
            for n, p in model.named_parameters()
        }


def run_case(rank, strategy, shape):
    mesh = (
        init_device_mesh("cpu", shape, mesh_dim_names=("replicate", "shard"))
        if shape
        else None
    )
    torch.manual_seed(0)
    module = MLP()
    init = {k: v.clone() for k, v in module.state_dict().items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = FSDP(
            module,
            sharding_strategy=strategy,
            device_mesh=mesh,
            auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
            device_id=torch.device("cpu"),  # FSDP1 needs an explicit CPU device_id
        )
    switched = any("switching to use `NO_SHARD`" in str(w.message) for w in caught)
    handles = []
    for m in FSDP.fsdp_modules(model):
        if m._handle is None:
            continue
        fp = m._handle.flat_param
        handles.append(
            {
                "local": fp.numel(),
                "unsharded": fp._unpadded_unsharded_size.numel(),
                "shard_group": m.process_group.size(),
                "replicate_group": m._inter_node_pg.size() if hasattr(m, "_inter_node_pg") else None,
                "effective": m.sharding_strategy.name,
            }
        )
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn(model, batch(rank)).backward()
    opt.step()
    got = full_params(model)
    ref = reference(init)
    ref_diff = max((got[k] - ref[k]).abs().max().item() for k in ref)
    flat = torch.cat([got[k].flatten() for k in sorted(got)])
    return {
        "switched_to_no_shard": switched,
        "handles": handles,
        "max_diff_vs_reference": ref_diff,
        "params": flat.tolist(),
    }


def dsd_probe(rank):
    """Extra, informational: DSD get_state_dict on the (2,1) HYBRID_SHARD model."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(0)
    model = FSDP(
        MLP(),
        sharding_strategy=ShardingStrategy.HYBRID_SHARD,
        device_mesh=mesh,
        auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
        device_id=torch.device("cpu"),
    )
    opt = torch.optim.AdamW(model.parameters())
    loss_fn(model, batch(rank)).backward()
    opt.step()
    try:
        get_state_dict(model, opt)
        return "ok"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:160]


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
        res = {label: run_case(rank, strat, shape) for label, (strat, shape, _) in CASES.items()}
        res["_dsd"] = dsd_probe(rank)  # last: on 2.13 only rank 1 raises, nothing runs after it
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    # No teardown: after only rank 1 raised in get_state_dict, destroying the group can
    # abort the process in gloo's threads ("terminate called without an active exception",
    # SIGABRT) before anything is written, and the script would say 2. Write, then leave at once.
    os._exit(0)


def main():
    print(f"torch {torch.__version__}")
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

    verdict = {}
    for label, (_, shape, is_bug_case) in CASES.items():
        per_rank = [res[label] for res in results]
        p0, p1 = (torch.tensor(pr["params"]) for pr in per_rank)
        replica_diff = (p0 - p1).abs().max().item()
        ref_diff = max(pr["max_diff_vs_reference"] for pr in per_rank)
        h = per_rank[0]["handles"]
        # a (R, 1) mesh must leave the whole model on each rank: local numel == unsharded numel
        full_local = all(x["local"] == x["unsharded"] for pr in per_rank for x in pr["handles"])
        ok = replica_diff <= TOL and ref_diff <= TOL and (full_local or shape != (2, 1))
        verdict[label] = ok
        print(
            f"{label:28s} effective={h[0]['effective']:13s} switched_warning="
            f"{per_rank[0]['switched_to_no_shard']!s:5s} shard_group={h[0]['shard_group']} "
            f"replicate_group={h[0]['replicate_group']} local/unsharded numel="
            f"{[(x['local'], x['unsharded']) for x in h]} | rank0-vs-rank1 max|diff|={replica_diff:.3e} "
            f"vs-reference max|diff|={ref_diff:.3e} -> {'ok' if ok else 'WRONG'}"
        )
    print(f"extra (informational): get_state_dict on the (2,1) HYBRID_SHARD model, use_orig_params=False: "
          f"{[res['_dsd'] for res in results]}")

    controls = [label for label, (_, _, bug) in CASES.items() if not bug]
    if not all(verdict[c] for c in controls):
        print("ERROR: a control (HYBRID_SHARD on (1,2), NO_SHARD on the world group) failed; cannot judge")
        return 2
    bad = [label for label, (_, _, bug) in CASES.items() if bug and not verdict[label]]
    if bad:
        print(
            f"BUG PRESENT: {bad} on a (2,1) mesh: FSDP1 clamps to NO_SHARD over the size-1 shard group "
            "and never all-reduces over the replicate dim; the two replicas differ after one step"
        )
        return 1
    print("FIXED: HYBRID_SHARD on a (2,1) mesh keeps the replicas equal and matches the reference step")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

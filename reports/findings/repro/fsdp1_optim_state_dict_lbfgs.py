"""FSDP1 optim_state_dict raises for LBFGS, whose state tensors are not shaped like a parameter.

Bug: FullyShardedDataParallel (FULL_SHARD, use_orig_params=False, CPU, gloo, 2 ranks) around
nn.Sequential(Linear 13->24, ReLU, Linear 24->16, ReLU, Linear 16->4), auto-wrapped per Linear
(ModuleWrapPolicy), trained 2 steps with torch.optim.LBFGS(lr=0.1, max_iter=2, history_size=3)
and a closure. LBFGS keeps all of its state on its first parameter (here the first FlatParameter,
this rank's shard of 168 elements), and that state holds flat tensors spanning *all* the
optimizer's parameters (d and prev_flat_grad have 402 elements = the sum of the local shards;
old_dirs / old_stps / ro / al are lists). FSDP.optim_state_dict(model, optim), under both
FULL_STATE_DICT and SHARDED_STATE_DICT, raises
"RuntimeError: ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (402),
got (168))": _communicate_optim_state (torch/distributed/fsdp/_optim_utils.py) all-gathers every
positive-dimension tensor state into a buffer shaped like the flat parameter, under the in-code
assumption "positive-dimension tensor optimizer state has the same shape as the sharded flat
parameter".

Correct behaviour: optim_state_dict returns a state dict (as it does here for Adam, the control),
or FSDP rejects the optimizer with a clear message that its state is not parameter-shaped.

(info) Without auto-wrapping (one FlatParameter, so d/prev_flat_grad happen to match it),
optim_state_dict returns, but it copies LBFGS's global state into every original parameter's
entry, with the history lists (old_dirs, ...) left as this rank's unsplit 402-element shards, and
FSDP.optim_state_dict_to_load of that dict raises "TypeError: unhashable type: 'list'"
(_flatten_non_tensor_optim_state). Printed as an info line; it does not affect the exit code.

Seen on: torch 2.13.0+cpu (gloo, CPU, 2 ranks).
Upstream: not found (likely new). LBFGS documents only "all parameters have to be on a single
device" and "no per-parameter options / one param group"; FSDP1 documents no requirement that
optimizer state be parameter-shaped (the assumption is an internal code comment).

Run: python reports/findings/repro/fsdp1_optim_state_dict_lbfgs.py
Exit 1 + "BUG PRESENT:" if optim_state_dict raises for the auto-wrapped LBFGS model (either state
dict type), 0 + "FIXED:" if not, 2 on any setup failure (including the Adam control failing).
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
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

WORLD = 2
TIMEOUT_S = 300  # hang guard only; generous because the 2-core machine may be shared
TYPES = {"FULL_STATE_DICT": StateDictType.FULL_STATE_DICT, "SHARDED_STATE_DICT": StateDictType.SHARDED_STATE_DICT}


def build(optim_name, auto_wrap):
    torch.manual_seed(0)
    model = FSDP(
        nn.Sequential(nn.Linear(13, 24), nn.ReLU(), nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 4)),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        use_orig_params=False,
        auto_wrap_policy=ModuleWrapPolicy({nn.Linear}) if auto_wrap else None,
        device_id=torch.device("cpu"),  # FSDP1 needs an explicit CPU device_id without an accelerator
    )
    if optim_name == "LBFGS":
        optim = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2, history_size=3)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, optim


def train(model, optim):
    x = torch.randn(8, 13, generator=torch.Generator().manual_seed(1))

    def closure():
        optim.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(2):
        if isinstance(optim, torch.optim.LBFGS):
            optim.step(closure)
        else:
            closure()
            optim.step()


def shapes(v):
    if torch.is_tensor(v):
        return list(v.shape)
    if isinstance(v, list):
        return [shapes(t) for t in v]
    return type(v).__name__


def first_line(e):
    msg = str(e).strip()
    return f"{type(e).__name__}: {msg.splitlines()[0] if msg else ''}"


def case(optim_name, auto_wrap, sd_type):
    model, optim = build(optim_name, auto_wrap)
    train(model, optim)
    out = {}
    if optim_name == "LBFGS":
        st = optim.state[optim.param_groups[0]["params"][0]]
        out["first_param_numel"] = optim.param_groups[0]["params"][0].numel()
        out["state_shapes"] = {k: shapes(st[k]) for k in ("d", "prev_flat_grad") if k in st}
    FSDP.set_state_dict_type(model, TYPES[sd_type])
    try:
        osd = FSDP.optim_state_dict(model, optim)
        out["error"] = None
    except Exception as e:
        out["error"] = first_line(e)
        return out
    if not auto_wrap and optim_name == "LBFGS":  # info: can the dict be loaded back?
        first = next(iter(osd["state"].values()), {})
        out["old_dirs_shapes"] = shapes(first.get("old_dirs", []))
        out["n_state_entries"] = len(osd["state"])
        model2, optim2 = build(optim_name, auto_wrap)
        FSDP.set_state_dict_type(model2, TYPES[sd_type])
        try:
            optim2.load_state_dict(FSDP.optim_state_dict_to_load(model2, optim2, osd))
            out["reload_error"] = None
        except Exception as e:
            out["reload_error"] = first_line(e)
    return out


def worker(rank, tmp):
    warnings.filterwarnings("ignore")  # FSDP1 deprecation and CPU-device warnings
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        res = {}
        for sd_type in TYPES:
            for key, (optim_name, auto_wrap) in {
                "adam_wrap": ("Adam", True),
                "lbfgs_wrap": ("LBFGS", True),
                "lbfgs_nowrap": ("LBFGS", False),
            }.items():
                res[f"{key}/{sd_type}"] = case(optim_name, auto_wrap, sd_type)
                dist.barrier()  # keep the ranks in step between cases
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    # write the result before teardown, so a teardown crash cannot change the verdict
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def main():
    tmp = tempfile.mkdtemp()
    ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            if ctx.join(timeout=1):
                break
        except Exception as e:  # a rank died (e.g. in teardown); judge by the result file if any
            print(f"note: worker exited abnormally: {type(e).__name__}")
            break
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
    path = os.path.join(tmp, "rank0.json")
    if not os.path.exists(path):
        print("ERROR: rank 0 wrote no result")
        return 2
    with open(path) as f:
        res = json.load(f)
    if "setup_error" in res:
        print(f"rank 0 setup failure:\n{res['setup_error']}")
        return 2
    failed = []
    for sd_type in TYPES:
        ctl = res[f"adam_wrap/{sd_type}"]
        print(f"control Adam, auto-wrapped, {sd_type}: {ctl['error'] or 'ok'}")
        if ctl["error"]:
            print("ERROR: the Adam control failed too; cannot judge")
            return 2
    for sd_type in TYPES:
        r = res[f"lbfgs_wrap/{sd_type}"]
        print(
            f"LBFGS, auto-wrapped, {sd_type}: first param numel {r['first_param_numel']}, "
            f"state shapes {r['state_shapes']} -> {r['error'] or 'ok'}"
        )
        if r["error"]:
            failed.append(f"{sd_type}: {r['error']}")
    for sd_type in TYPES:
        r = res[f"lbfgs_nowrap/{sd_type}"]
        line = f"(info) LBFGS, not wrapped, {sd_type}: optim_state_dict {r['error'] or 'ok'}"
        if r["error"] is None:
            line += (
                f", {r['n_state_entries']} state entries, old_dirs shapes {r['old_dirs_shapes']}, "
                f"optim_state_dict_to_load: {r['reload_error'] or 'ok'}"
            )
        print(line)
    if failed:
        print("BUG PRESENT: FSDP.optim_state_dict raises for LBFGS: " + " | ".join(failed))
        return 1
    print("FIXED: FSDP.optim_state_dict returns for an auto-wrapped FSDP1 model trained with LBFGS")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

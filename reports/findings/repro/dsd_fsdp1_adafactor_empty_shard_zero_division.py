"""FSDP1 (use_orig_params=True) + Adafactor: DSD's load of a fresh optimizer raises ZeroDivisionError on an empty shard.

Bug: with FullyShardedDataParallel (FULL_SHARD, use_orig_params=True, CPU, gloo, 2 ranks) around
nn.Sequential(Linear 13->24, ReLU, Linear 24->16, ReLU, Linear 16->7) (one FSDP unit, 855 elements),
each rank's shard of the flat parameter holds none of some original parameters: rank 0 sees
[312, 24, 92, 0, 0, 0] elements, rank 1 [0, 0, 292, 16, 112, 7]. FSDP documents this ("An original
parameter may have all, some, or none of its data present for a given rank. In the none case, its
data will be like a size-0 empty tensor."). Training torch.optim.Adafactor(lr=1e-2) works (the empty
views get grad None and are skipped), and so do get_state_dict + dcp.save. Loading into a freshly
built model + Adafactor fails: get_state_dict(fresh_model, fresh_optim), used to build the dcp.load
template, calls _init_optim_state (torch/distributed/checkpoint/state_dict.py), which gives *every*
parameter, the size-0 views included, a zero gradient, sets lr to 0 and calls optim.step(). Adafactor
then computes ``alpha = max(eps2, param.norm(2).item() / (param.numel() ** 0.5)) * rho_t``
(torch/optim/_adafactor.py line 381, _single_tensor_adafactor; foreach=True: line 531) -> 0.0 / 0.0
-> "ZeroDivisionError: float division by zero". set_state_dict on a fresh optimizer hits the same
call (_load_optim_state_dict -> _init_optim_state).
The root is in Adafactor: its step raises for any zero-element parameter that has a gradient (an
"(info)" line shows it with a bare parameter, no distributed code); Adam, AdamW, SGD, Adagrad,
RMSprop, NAdam, RAdam, Adamax, Adadelta, ASGD and Rprop all step such a parameter fine. DSD's init
step is what hands the empty FSDP1 views a gradient.
Not needed (checked in exploration): an LR scheduler (SequentialLR of LinearLR + ExponentialLR gives
the identical error; lr is forced to 0 anyway and does not enter the division), or a trained
checkpoint (get_state_dict on a never-trained fresh model + Adafactor already raises).
Needed: a size-0 parameter in the optimizer. FSDP1 with use_orig_params=False (the optimizer sees
the 428-element FlatParameter shard) works (printed "(info)"), as do DDP and world size 1 (no empty
shards); FSDP2 (fully_shard) cannot even train Adafactor (DTensor _NormPartial error, a separate
finding: fsdp2_optimizer_step_dtensor_ops.py).

Correct behaviour: the trained Adafactor state loads into a fresh model + Adafactor through
get_state_dict template -> dcp.load -> set_state_dict and equals the saved per-rank state, as the
same pipeline does for Adam (control line); i.e. Adafactor.step should skip or handle zero-element
parameters like the other torch.optim optimizers (or DSD should not give them gradients).
Caveat a maintainer may raise: FSDP1's sharded views are 1-D, so Adafactor under FSDP1 never
factors and computes RMS per shard -- not the unsharded algorithm (pytorch/pytorch#109581 notes
flat-parameter FSDP "cannot compose with Adafactor"). That is a semantic limitation; the crash is
not.

Seen on: torch 2.13.0+cpu (gloo, CPU, 2 ranks).
Upstream: not found (likely new); searched issues and closed/merged PRs for Adafactor
ZeroDivisionError / empty or zero-numel parameters and DSD _init_optim_state. Related:
pytorch/pytorch#109581 (closed; Adafactor feature request, FSDP composition notes),
pytorch/pytorch#104765 (closed PR; FSDP optim_state_dict and init of states for empty params),
pytorch/pytorch#133415 (closed; _init_optim_state dummy step issues).

Run: python reports/findings/repro/dsd_fsdp1_adafactor_empty_shard_zero_division.py
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
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy

WORLD = 2
TIMEOUT_S = 240  # hang guard only; generous because the 2-core machine may be shared


def build(make_opt, use_orig_params=True):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(13, 24), nn.ReLU(), nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 7))
    model = FSDP(
        mlp,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        use_orig_params=use_orig_params,
        device_id=torch.device("cpu"),  # FSDP1 needs an explicit CPU device_id without an accelerator
    )
    return model, make_opt(model.parameters())


def adafactor(params):
    return torch.optim.Adafactor(params, lr=1e-2)


def adam(params):
    return torch.optim.Adam(params, lr=1e-2)


def snapshot(optim):
    return {
        k: {n: (v.clone() if isinstance(v, torch.Tensor) else v) for n, v in s.items()}
        for k, s in optim.state_dict()["state"].items()
    }


def same_state(a, b):
    if a.keys() != b.keys():
        return False
    for k in a:
        if a[k].keys() != b[k].keys():
            return False
        for n in a[k]:
            x, y = a[k][n], b[k][n]
            if isinstance(x, torch.Tensor):
                if not (isinstance(y, torch.Tensor) and x.shape == y.shape and torch.equal(x, y)):
                    return False
            elif x != y:
                return False
    return True


def err(e):
    frames = traceback.extract_tb(e.__traceback__)
    where = ", ".join(
        f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
        for f in frames
        if "torch" in f.filename and "_contextlib" not in f.filename
    )
    return f"{type(e).__name__}: {e} [{where}]"


def round_trip(make_opt, tmp, tag, use_orig_params=True):
    model, optim = build(make_opt, use_orig_params)
    shapes = [p.numel() for p in model.parameters()]
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        model(torch.randn(4, 13, generator=gen)).sum().backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
    ref = snapshot(optim)
    msd, osd = get_state_dict(model, optim)
    path = os.path.join(tmp, f"ckpt_{tag}")
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    fresh, fresh_optim = build(make_opt, use_orig_params)
    try:
        tmsd, tosd = get_state_dict(fresh, fresh_optim)  # the dcp.load template
        sd = {"model": tmsd, "optim": tosd}
        dcp.load(sd, checkpoint_id=path)
        set_state_dict(fresh, fresh_optim, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        result = "restored" if same_state(ref, snapshot(fresh_optim)) else "no error, but state differs"
    except Exception as e:
        result = err(e)
    return {"local_numels": shapes, "result": result}


def bare_empty_param(foreach):
    p = nn.Parameter(torch.zeros(0))
    q = nn.Parameter(torch.ones(3))
    opt = torch.optim.Adafactor([p, q], lr=1e-2, foreach=foreach)
    p.grad, q.grad = torch.zeros(0), torch.ones(3)
    try:
        opt.step()
        return "steps fine"
    except Exception as e:
        return err(e)


def worker(rank, tmp):
    res = {}
    try:
        warnings.filterwarnings("ignore")
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        res["adam"] = round_trip(adam, tmp, "adam")
        res["adafactor"] = round_trip(adafactor, tmp, "adafactor")
        res["info_flat"] = round_trip(adafactor, tmp, "adafactor_flat", use_orig_params=False)
        res["info_bare"] = {"foreach=False": bare_empty_param(False), "foreach=True": bare_empty_param(True)}
    except Exception:
        res = {"setup_error": traceback.format_exc()}
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
        except Exception as e:  # a rank died; judge from what the ranks wrote (teardown crashes are not setup failures)
            print(f"(note) a rank exited abnormally: {type(e).__name__}")
            if not all(os.path.exists(os.path.join(tmp, f"rank{r}.json")) for r in range(WORLD)):
                time.sleep(5)
            break
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
    results = {}
    for r in range(WORLD):
        path = os.path.join(tmp, f"rank{r}.json")
        if not os.path.exists(path):
            print(f"ERROR: rank {r} wrote no result")
            return 2
        with open(path) as f:
            results[r] = json.load(f)
        if "setup_error" in results[r]:
            print(f"rank {r} setup failure:\n{results[r]['setup_error']}")
            return 2
    for r, res in results.items():
        print(f"rank {r}: local numels of the original params (use_orig_params=True): {res['adam']['local_numels']}")
        print(f"rank {r}: control Adam round trip -> {res['adam']['result']}")
        print(f"rank {r}: Adafactor round trip -> {res['adafactor']['result']}")
        print(f"rank {r}: (info) Adafactor, use_orig_params=False (FlatParameter) -> {res['info_flat']['result']}")
    for k, v in results[0]["info_bare"].items():
        print(f"(info) bare Adafactor step, a zero-element parameter with a grad, {k} -> {v}")
    if any(res["adam"]["result"] != "restored" for res in results.values()):
        print("ERROR: the Adam control does not round-trip; cannot judge")
        return 2
    outcomes = [res["adafactor"]["result"] for res in results.values()]
    if all(o == "restored" for o in outcomes):
        print("FIXED: Adafactor state round-trips through DSD + DCP with FSDP1 use_orig_params=True on empty shards")
        return 0
    if any("ZeroDivisionError" in o for o in outcomes):
        print(
            "BUG PRESENT: DSD's _init_optim_state steps the fresh Adafactor with zero grads on FSDP1's size-0 "
            "parameter views -> ZeroDivisionError in Adafactor (param.numel() ** 0.5 == 0)"
        )
    else:
        print("BUG PRESENT: the ZeroDivisionError is gone, but the Adafactor state still does not round-trip (see above)")
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

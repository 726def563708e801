"""FSDP2 (fully_shard): optimizer.step() raises in DTensor sharding propagation for four torch.optim setups.

Bug: on a tiny MLP (Linear 13->24, 24->16, 16->3) with fully_shard on every Linear and on the root
(parameters are DTensors, Shard(0) on a 1-D mesh of 2 ranks), a plain SGD(momentum) step works, but
the first step() of each of these optimizers raises before any checkpoint is taken:

- Rprop(lr=1e-2): on CPU the default is the single-tensor path (foreach=False; DTensor params
  are on "cpu", which is not a foreach default device). Its ``sign[sign.gt(0)] = etaplus``
  (torch/optim/rprop.py, _single_tensor_rprop) is aten.index_put_.default with a boolean mask;
  the index_put single-dim strategy treats the indexed dim 0 as not shardable, and as the op is
  in-place on a Shard(0) tensor it raises RuntimeError "aten.index_put_.default: in-place
  operations that require placement changes are not supported ..." (expand_to_full_mesh_op_strategy,
  torch/distributed/tensor/_ops/utils.py). foreach=False is the same path; foreach=True instead
  raises NotImplementedError "Operator aten._foreach_copy_.default does not have a sharding
  strategy registered."
- Adafactor(lr=1e-2): default foreach=None means the single-tensor path.
  ``torch.norm(grad, dim=-2, keepdim=True).square_()`` reduces over the sharded dim, giving a
  _NormPartial DTensor, and the in-place square_ (aten.pow_.Scalar) cannot keep that placement:
  RuntimeError "aten.pow_.Scalar: in-place operations that require placement changes are not
  supported. The input has placement (_NormPartial(2),) ...". foreach=False is identical;
  foreach=True fails the same way in aten._foreach_mul_.List (message names aten.mul.Tensor).
- LBFGS(lr=0.1, max_iter=2, history_size=3), with a closure: _gather_flat_grad does
  ``p.grad.view(-1)``; for the 3x16 weight (dim 0 split 2/1 over 2 ranks) the view strategy
  (reshape_strategy, torch/distributed/tensor/_ops/_view_ops.py) raises RuntimeError "Cannot
  flatten unevenly sharded tensor: dimension 0 (size 3) is not evenly divisible by mesh
  dimension 0 (size 2) ..." for aten.view.default. Evenly divisible shapes (e.g. 16->4) step fine.
- SGD(lr=1e-2, momentum=0.9, fused=True): NotImplementedError "Operator aten._fused_sgd_.default
  does not have a sharding strategy registered." (only _fused_adam(w) have one).

Correct behaviour: step() works on DTensor parameters as it does for SGD/Adam/AdamW, or these
optimizers are rejected up front with a documented message. (FSDP2 docs only say the optimizer
must be built from, and step on, the DTensor parameters; no optimizer list is given.)

Seen on: torch 2.13.0+cpu (gloo, CPU, 2 ranks).
Upstream: no issue for these optimizers found. Related: pytorch/pytorch#143372 (open, DTensor
view of an unevenly sharded tensor), #126670 (closed, fused AdamW under FSDP2; fixed by #125369,
which added only the _fused_adam(w) strategies), #109581 (closed, Adafactor feature request;
notes Adafactor under per-parameter FSDP needs a reduction across ranks), #170035 (merged,
_NormPartial redistribution for out-of-place pointwise ops; not in-place).

Run: python reports/findings/repro/fsdp2_optimizer_step_dtensor_ops.py
Exit 1 + "BUG PRESENT:" if any of the four raises, 0 + "FIXED:" if none does, 2 on any setup
failure (including the SGD control failing). "(info)" lines do not affect the exit code.
"""

import datetime
import json
import os
import re
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.fsdp import fully_shard

WORLD = 2
TIMEOUT_S = 300  # hang guard only; generous because the 2-core machine may be shared

# name -> (factory, counts for the verdict)
CASES = {
    "SGD(momentum) [control]": (lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9), False),
    "Rprop(lr=1e-2)": (lambda p: torch.optim.Rprop(p, lr=1e-2), True),
    "Adafactor(lr=1e-2)": (lambda p: torch.optim.Adafactor(p, lr=1e-2), True),
    "LBFGS(lr=0.1, max_iter=2, history_size=3)": (
        lambda p: torch.optim.LBFGS(p, lr=0.1, max_iter=2, history_size=3),
        True,
    ),
    "SGD(momentum=0.9, fused=True)": (
        lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, fused=True),
        True,
    ),
    "(info) Rprop(foreach=False)": (lambda p: torch.optim.Rprop(p, lr=1e-2, foreach=False), False),
    "(info) Rprop(foreach=True)": (lambda p: torch.optim.Rprop(p, lr=1e-2, foreach=True), False),
    "(info) Adafactor(foreach=False)": (
        lambda p: torch.optim.Adafactor(p, lr=1e-2, foreach=False),
        False,
    ),
    "(info) Adafactor(foreach=True)": (
        lambda p: torch.optim.Adafactor(p, lr=1e-2, foreach=True),
        False,
    ),
}


def build():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(13, 24), nn.ReLU(), nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 3)
    )
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def try_steps(name, factory):
    model = build()
    optim = factory(model.parameters())
    x = torch.randn(8, 13, generator=torch.Generator().manual_seed(1))

    def closure():
        optim.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        return loss

    try:
        for _ in range(2):
            if isinstance(optim, torch.optim.LBFGS):
                optim.step(closure)
            else:
                closure()
                optim.step()
        return {"ok": True}
    except Exception as e:
        msg = str(e)
        ops = re.findall(r"\baten\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+", msg)
        return {
            "ok": False,
            "type": type(e).__name__,
            "first_line": msg.strip().splitlines()[0] if msg.strip() else "",
            "op": ops[0] if ops else "?",
        }


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
        res = {"cases": {}}
        for name, (factory, _) in CASES.items():
            res["cases"][name] = try_steps(name, factory)
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
    for name, (_, counts) in CASES.items():
        r = res["cases"][name]
        if r["ok"]:
            print(f"{name}: ok")
        else:
            print(f"{name}: {r['type']} [{r['op']}]: {r['first_line']}")
            if counts:
                failed.append(name)
    if not res["cases"]["SGD(momentum) [control]"]["ok"]:
        print("ERROR: the SGD(momentum) control step failed too; cannot judge")
        return 2
    if failed:
        print(f"BUG PRESENT: optimizer.step() on FSDP2 DTensor parameters raises for: {', '.join(failed)}")
        return 1
    print("FIXED: Rprop, Adafactor, LBFGS and fused SGD all step on FSDP2 DTensor parameters")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

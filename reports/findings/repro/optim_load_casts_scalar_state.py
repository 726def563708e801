"""Optimizer.load_state_dict casts fp32 scalar optimizer state to a bf16 param's dtype.

Bug: NAdam's state["mu_product"] and ASGD's state["eta"] / state["mu"] are 0-dim fp32 tensors
(torch.optim.optimizer._get_scalar_dtype()) whatever the param dtype. With a pure-bfloat16 model,
opt2.load_state_dict(opt.state_dict()) turns them into bfloat16: Optimizer._process_value_according_to_
param_policy (torch/optim/optimizer.py) casts every floating-point state tensor except "step" to
param.dtype. The values are rounded, and the resumed run is no longer bitwise equal to the original one
(params for NAdam, ASGD's averaged params "ax"; bf16 rounding can hide the 1-ulp drift again later).

Correct behaviour: scalar state keeps its saved dtype (fp32) and value, as "step" does, and every further
step of the resumed optimizer matches the original bitwise. fp32 params are unaffected (no cast happens).

Expected output while the bug is present (exit 1), after two "control fp32 ... 0 changed" lines:
  bf16 NAdam: 2 scalar entries changed, resumed run: first differs at step 4: params[0] param
  bf16 ASGD: 4 scalar entries changed, resumed run: first differs at step 7: params[0] ax
    NAdam state[0]['mu_product']: torch.float32 0.09121428430080414 -> torch.bfloat16 0.09130859375
    ASGD state[0]['eta']: torch.float32 0.00988895632326603 -> torch.bfloat16 0.0098876953125
    ASGD state[0]['mu']: torch.float32 0.3333333432674408 -> torch.bfloat16 0.333984375  (and params[1])
  BUG PRESENT: 6 scalar state entries changed dtype/value on load; resumed run drifts for NAdam, ASGD
Exit 0 + "FIXED:" if the scalar state keeps dtype and value and the resumed run stays bitwise equal.

Seen on: torch 2.13.0+cpu, 2.15.0+cu132 (CPU). Upstream: general cast is #43706 (open); "step" was
exempted by PR #75214 for #74424, follow-up #75224 (closed); this scalar-state case not reported.

Run: python reports/findings/repro/optim_load_casts_scalar_state.py
"""

import copy
import io
import sys

import torch
from torch import nn

STEPS, MORE_STEPS = 3, 10
SCALAR_KEYS = {"NAdam": ("mu_product",), "ASGD": ("eta", "mu")}
OPTIM = {  # ASGD t0=0, lambd=0.5 so "mu" leaves 1.0 (exact in bf16) right away
    "NAdam": lambda p: torch.optim.NAdam(p, lr=0.01),
    "ASGD": lambda p: torch.optim.ASGD(p, lr=0.01, lambd=0.5, t0=0),
}


def train_step(model, opt, step):
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1000 + step)).to(model.weight.dtype)
    opt.zero_grad()
    model(x).float().pow(2).mean().backward()
    opt.step()


def check(name, dtype=torch.bfloat16):
    torch.manual_seed(0)
    model = nn.Linear(4, 3).to(dtype)
    opt = OPTIM[name](model.parameters())
    for s in range(STEPS):
        train_step(model, opt, s)
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    model2 = copy.deepcopy(model)
    opt2 = OPTIM[name](model2.parameters())
    opt2.load_state_dict(torch.load(buf, weights_only=True))
    pairs = list(zip(model.parameters(), model2.parameters()))
    diffs = []
    for i, (p, p2) in enumerate(pairs):
        for key in SCALAR_KEYS[name]:
            a, b = opt.state[p][key], opt2.state[p2][key]
            if a.dtype != b.dtype or not torch.equal(a.float(), b.float()):
                diffs.append(f"{name} state[{i}][{key!r}]: {a.dtype} {a.item()!r} -> {b.dtype} {b.item()!r}")
    for s in range(STEPS, STEPS + MORE_STEPS):  # continue both; report the first step that differs
        train_step(model, opt, s)
        train_step(model2, opt2, s)
        for i, (p, p2) in enumerate(pairs):
            bad = [k for k, v in opt.state[p].items() if v.dim() and not torch.equal(v, opt2.state[p2][k])]
            bad += ["param"] * (not torch.equal(p, p2))
            if bad:
                return diffs, f"first differs at step {s}: params[{i}] {'+'.join(bad)}"
    return diffs, None


def main():
    print(f"torch {torch.__version__}")
    for name in OPTIM:  # control: fp32 params, nothing is cast
        diffs, drift_at = check(name, torch.float32)
        print(f"control fp32 {name}: {len(diffs)} changed, resumed run: {drift_at or 'bitwise equal'}")
    all_diffs, drift = [], []
    for name in OPTIM:
        diffs, drift_at = check(name)
        all_diffs += diffs
        drift += [name] * bool(drift_at)
        print(f"bf16 {name}: {len(diffs)} scalar entries changed, resumed run: {drift_at or 'bitwise equal'}")
    for d in all_diffs:
        print("  " + d)
    if all_diffs or drift:
        print(
            f"BUG PRESENT: {len(all_diffs)} scalar state entries changed dtype/value on load; "
            f"resumed run drifts for {', '.join(drift) or 'none'}"
        )
        return 1
    print("FIXED: NAdam mu_product and ASGD eta/mu keep fp32 dtype and value; resumed run bitwise equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())

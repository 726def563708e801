"""DSD refuses to load LBFGS's own state dict: LBFGS keeps all its state on its first parameter.

Bug: torch.optim.LBFGS keeps its whole state (func_evals, n_iter, d, t, old_dirs, old_stps, ro,
H_diag, prev_flat_grad, prev_loss) in self.state[first parameter]; its other parameters have none.
get_state_dict takes it that way. set_state_dict (strict=True, the default) then requires state for
every parameter that requires a gradient (_load_optim_state_dict, torch/distributed/checkpoint/
state_dict.py) and raises "Missing optimizer state for parameter 'bias' in checkpoint ... use
StateDictOptions(strict=False)": the state dict get_state_dict made does not load back. In the
usual resume a fresh LBFGS meets dsd-init-optim-state-lbfgs-closure first (DSD's own init step
calls step() without the closure LBFGS requires); here the fresh LBFGS's state is made first, as a
user works around that (one step with a closure, zero gradients, lr 0), so DSD skips its init step
and the load reaches the strict check. Here: a plain nn.Linear(4, 4) (two parameters), no process
group (get/set_state_dict take any module), LBFGS(lr=0.1, max_iter=2, history_size=3) trained 2
steps with a closure.

Correct behaviour: get_state_dict's own output loads back through set_state_dict with default
options, as optimizer.state_dict() loads back through LBFGS.load_state_dict (setup check). A control
line shows that the same dict loads with strict=False and gives back LBFGS's state, bitwise.

Seen on: torch 2.13.0+cpu (CPU, 1 process).
Upstream: the strict missing-state check of pytorch/pytorch#192202 (open; its case is a parameter
that never got a gradient, fix PR pytorch/pytorch#192307 open); LBFGS's layout is not named there.

Run: python reports/findings/repro/dsd_strict_lbfgs_state_first_param.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import sys
import traceback

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict


def build():
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    return model, torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2, history_size=3)


def train(model, optim, steps):
    x, y = torch.randn(8, 4, generator=torch.Generator().manual_seed(1)), torch.randn(8, 4)

    def closure():
        optim.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    for _ in range(steps):
        optim.step(closure)


def state_made_first(model, optim):
    """The workaround of the closure refusal: LBFGS's state made by one step with lr 0."""
    for group in optim.param_groups:
        group["lr"], lr = 0.0, group["lr"]
    optim.step(lambda: torch.zeros(()))
    for group in optim.param_groups:
        group["lr"] = lr
    optim.zero_grad(set_to_none=True)


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def load(msd, osd, strict):
    fresh, fresh_optim = build()
    state_made_first(fresh, fresh_optim)
    try:
        set_state_dict(
            fresh, fresh_optim, model_state_dict=msd, optim_state_dict=osd, options=StateDictOptions(strict=strict)
        )
    except Exception as e:
        return None, f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
    return fresh_optim, None


def main():
    model, optim = build()
    train(model, optim, 2)
    plain = optim.state_dict()
    print(f"LBFGS's own state: parameters {sorted(plain['state'])} of {len(list(model.parameters()))}")
    own = build()[1]
    own.load_state_dict(plain)
    if not all(same(v, own.state_dict()["state"][0][k]) for k, v in plain["state"][0].items()):
        print("ERROR: LBFGS.load_state_dict does not give back its own state; cannot judge")
        return 2
    msd, osd = get_state_dict(model, optim)
    print(f"get_state_dict's optimizer state: {sorted(osd['state'])}")
    control, error = load(msd, osd, strict=False)
    if error is not None:
        print(f"ERROR: the control load (strict=False) failed: {error}; cannot judge")
        return 2
    back = control.state_dict()["state"][0]
    if not all(same(v, back[k]) for k, v in plain["state"][0].items()):
        print("ERROR: the control load (strict=False) did not give back LBFGS's state; cannot judge")
        return 2
    print("control strict=False: loads, LBFGS's state bitwise")
    _, error = load(msd, osd, strict=True)
    if error is not None:
        print(f"BUG PRESENT: set_state_dict of get_state_dict's own LBFGS state failed: {error}")
        return 1
    print("FIXED: get_state_dict's own LBFGS state loads back with default options")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

"""Optimizer.load_state_dict casts bf16 state built from a grad_dtype=bf16 gradient to the fp32 param dtype.

Bug: with fp32 parameters whose gradients are made bf16 through Tensor.grad_dtype
(p.grad_dtype = torch.bfloat16), SGD(momentum=0.9) builds state["momentum_buffer"] from the first
gradient (grad.detach().clone()), so it is bf16, and optimizer.state_dict() saves it as bf16. A fresh
optimizer's load_state_dict turns it into fp32: Optimizer._process_value_according_to_param_policy
(torch/optim/optimizer.py) casts every floating-point state tensor except "step" to param.dtype and
ignores param.grad_dtype. The resumed run then accumulates momentum in fp32 where the uninterrupted run
rounds it to bf16 every step, so the parameters are no longer bitwise equal after the first resumed step.
Same cast for Rprop "step_size", Adafactor "row_var"/"col_var", LBFGS "d"/"H_diag"/"prev_flat_grad".

Correct behaviour: load_state_dict keeps the saved dtype of state that was built from the gradient (bf16
here), and the resumed run matches the uninterrupted one bitwise. Without grad_dtype (control) the
buffer is fp32 both ways and the resumed run is bitwise equal.

Expected output while the bug is present (exit 1), after the "control (no grad_dtype)" line:
  grad_dtype=bf16: momentum_buffer dtype saved -> after load_state_dict: weight torch.bfloat16 ->
    torch.float32, bias torch.bfloat16 -> torch.float32
  grad_dtype=bf16: resumed run: first differs at step 3: weight[0, 0] A=0.04435229301452637
    B=0.044362057000398636 (momentum A torch.bfloat16, B torch.float32)
  BUG PRESENT: load_state_dict changed momentum_buffer bf16 -> fp32; resumed run not bitwise equal
Exit 0 + "FIXED:" if the buffer stays bf16 after loading and the resumed run is bitwise equal.
Exit 2 + "CANNOT SHOW HERE:" if this torch has no Tensor.grad_dtype or the control fails.

Seen on: torch 2.13.0+cpu, 2.15.0+cu132 (CPU). Upstream: the general cast is #43706 (open); "step" was
exempted by PR #75214 (#74424), follow-up #75224 (closed). grad_dtype came with PR #162815 (reverted),
relanded as #164751. #191918 (open; PRs #191925, #191998 open) is the DSD get/set_optimizer_state_dict
failure on grad_dtype params, not this cast. This load_state_dict case is not reported.

Run: python reports/findings/repro/optim_load_casts_grad_dtype_state.py
"""

import io
import sys

import torch
from torch import nn

STEPS, MORE_STEPS = 3, 3


def make(grad_dtype):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)  # fp32 params
    if grad_dtype is not None:
        for p in model.parameters():
            p.grad_dtype = grad_dtype
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(model, opt, step):
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1000 + step))
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()


def check(grad_dtype):
    model, opt = make(grad_dtype)
    for s in range(STEPS):
        train_step(model, opt, s)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, buf)
    saved = [v["momentum_buffer"].dtype for v in opt.state_dict()["state"].values()]

    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    model_b, opt_b = make(grad_dtype)  # fresh model + optimizer of the same kind
    model_b.load_state_dict(ckpt["model"])
    opt_b.load_state_dict(ckpt["optim"])
    loaded = [opt_b.state[p]["momentum_buffer"].dtype for p in model_b.parameters()]

    names = [n for n, _ in model.named_parameters()]
    pairs = list(zip(model.parameters(), model_b.parameters()))
    drift = None
    for s in range(STEPS, STEPS + MORE_STEPS):  # run A (uninterrupted) and run B (resumed), same batches
        train_step(model, opt, s)
        train_step(model_b, opt_b, s)
        for name, (a, b) in zip(names, pairs):
            if drift is None and not torch.equal(a, b):
                idx = tuple(int(i) for i in (a != b).nonzero()[0])
                drift = (
                    f"first differs at step {s}: {name}{list(idx)} A={a[idx].item()!r} B={b[idx].item()!r} "
                    f"(momentum A {opt.state[a]['momentum_buffer'].dtype}, "
                    f"B {opt_b.state[b]['momentum_buffer'].dtype})"
                )
    return saved, loaded, drift


def main():
    print(f"torch {torch.__version__}")
    if not hasattr(torch.Tensor, "grad_dtype"):
        print("CANNOT SHOW HERE: this torch has no Tensor.grad_dtype")
        return 2
    saved, loaded, drift = check(None)
    print(
        f"control (no grad_dtype): saved momentum_buffer {saved[0]}, after load_state_dict {loaded[0]}, "
        f"resumed run: {drift or 'bitwise equal'}"
    )
    if drift or any(d != torch.float32 for d in saved + loaded):
        print("CANNOT SHOW HERE: the control (fp32 grads) does not resume bitwise with fp32 state")
        return 2

    saved, loaded, drift = check(torch.bfloat16)
    pairs = ", ".join(f"{n} {a} -> {b}" for n, a, b in zip(("weight", "bias"), saved, loaded))
    print(f"grad_dtype=bf16: momentum_buffer dtype saved -> after load_state_dict: {pairs}")
    print(f"grad_dtype=bf16: resumed run: {drift or 'bitwise equal'}")
    changed = saved != loaded
    if changed or drift:
        print(
            f"BUG PRESENT: load_state_dict {'changed momentum_buffer bf16 -> fp32' if changed else 'kept the dtype'}; "
            f"resumed run {'not bitwise equal' if drift else 'bitwise equal'}"
        )
        return 1
    print("FIXED: momentum_buffer keeps its saved bf16 dtype on load; resumed run bitwise equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""get/set_optimizer_state_dict cannot take a fresh optimizer whose parameters have a grad_dtype.

Bug: torch.distributed.checkpoint.state_dict (DSD) creates a fresh optimizer's lazily made state
in _init_optim_state by giving every parameter a zero gradient, ``param.grad =
torch.zeros_like(param)`` (torch/distributed/checkpoint/state_dict.py, line 649 in 2.13.0), in the
parameter's dtype. A parameter whose ``grad_dtype`` is bf16 (fp32 master weights that accumulate
bf16 gradients, Tensor.grad_dtype since torch 2.10) rejects an fp32 gradient, so every DSD call that
reaches _init_optim_state with such an optimizer raises "attempting to assign a gradient with dtype
'float' to a tensor with grad_dtype 'BFloat16'". That is both halves of the usual DCP resume: the
load template (get_state_dict / get_optimizer_state_dict of the freshly built optimizer) and
set_optimizer_state_dict into it. Saving from the trained optimizer works (its state is not empty,
so the init step is skipped); so does an optimizer that makes its state when it is built (Adagrad).

Here: one gloo process, nn.Linear(4, 4) in fp32 with grad_dtype = torch.bfloat16 on every
parameter, SGD with momentum trained 2 steps (the gradients are bf16: checked), its state taken with
get_optimizer_state_dict; then a fresh model and SGD with the same grad_dtype, and
get_optimizer_state_dict(fresh) for the template, then set_optimizer_state_dict(fresh, saved).
Control: the same without grad_dtype loads and gives back the saved momentum.

Correct behaviour: the template is built and the saved state loads, as optimizer.load_state_dict
of the same state does. Upstream: pytorch/pytorch#191918 (open, reported 2026-08-03 with the same
diagnosis); its fix, PR #191925 (prime the gradient in param.grad_dtype), is open, not merged.

Run: python reports/findings/repro/dsd_init_optim_state_grad_dtype.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 + "CANNOT SHOW HERE:" where torch
has no Tensor.grad_dtype (before 2.10).
"""

from __future__ import annotations

import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

MESSAGE = "grad_dtype"


def build(grad_dtype: torch.dtype | None) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    if grad_dtype is not None:
        for p in model.parameters():
            p.grad_dtype = grad_dtype
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train(model: nn.Module, optim: torch.optim.Optimizer, grad_dtype: torch.dtype | None) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        optim.zero_grad()
        model(torch.randn(8, 4, generator=g)).square().mean().backward()
        want = grad_dtype or torch.float32
        got = {p.grad.dtype for p in model.parameters()}
        if got != {want}:
            raise RuntimeError(f"setup: gradients are {got}, not {want}")
        optim.step()


def round_trip(grad_dtype: torch.dtype | None) -> str | None:
    """None if the state loads back into a fresh optimizer equal to what was saved; else what failed."""
    model, optim = build(grad_dtype)
    train(model, optim, grad_dtype)
    saved = get_optimizer_state_dict(model, optim)
    fresh_model, fresh = build(grad_dtype)
    try:
        get_optimizer_state_dict(fresh_model, fresh)  # the template of a dcp.load
        set_optimizer_state_dict(fresh_model, fresh, saved)
    except RuntimeError as e:
        if MESSAGE in str(e):
            return f"{type(e).__name__}: {str(e).splitlines()[0]}"
        raise
    before = [s["momentum_buffer"] for s in optim.state.values()]
    after = [s["momentum_buffer"] for s in fresh.state.values()]
    if len(before) != len(after) or any(not torch.equal(a, b) for a, b in zip(before, after, strict=False)):
        return "the loaded momentum differs from the saved one"
    return None


def main() -> int:
    if not hasattr(torch.empty(()), "grad_dtype"):
        print(f"CANNOT SHOW HERE: torch {torch.__version__} has no Tensor.grad_dtype")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            control = round_trip(None)
            if control is not None:
                print(f"SETUP FAILED: the control (no grad_dtype) does not round-trip: {control}")
                return 2
            print("control: fp32 gradients, the fresh SGD's template and load work")
            bug = round_trip(torch.bfloat16)
        except Exception:
            traceback.print_exc()
            print("SETUP FAILED")
            return 2
        finally:
            dist.destroy_process_group()
    print(f"torch {torch.__version__}")
    if bug is not None:
        print(f"BUG PRESENT: grad_dtype=bfloat16: {bug}")
        return 1
    print("FIXED: the fresh optimizer's template and load work with grad_dtype=bfloat16")
    return 0


if __name__ == "__main__":
    sys.exit(main())

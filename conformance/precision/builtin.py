"""The precisions the matrix has built in. A new one is a Precision here (or in a module of its
own) and its line in conformance/precision/registry.py; from outside the package, `register`
in a pytest plugin (tests/new_precision_plugin.py)."""

from __future__ import annotations

import functools
import warnings

import torch

from conformance.precision.base import Precision

# The loss scale starts low enough that the tiny models' fp16 gradients never overflow, and grows
# every 2 steps: after the 3 steps before a save the scale (512) and the growth tracker (1) differ
# from a fresh scaler's (256, 0), so a scaler that is not restored is seen in the state, and a
# resumed run that continues from the wrong scale grows it at the wrong step.
LOSS_SCALE = (("init_scale", 256.0), ("growth_interval", 2))


@functools.cache
def _no_cpu_fp16_autocast() -> str | None:
    """Why this torch's CPU autocast cannot run fp16 (older ones warn and disable it: a cell would
    train in fp32 and pass for what it never did), or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=torch.float16):
            out = torch.nn.functional.linear(torch.ones(2, 2), torch.ones(2, 2))
    if out.dtype != torch.float16:
        return f"torch {torch.__version__}'s CPU autocast does not run float16 (it disables itself)"
    return None


def _no_grad_dtype() -> str | None:
    """Why this torch cannot set a parameter's gradient dtype (Tensor.grad_dtype), or None."""
    if not hasattr(torch.nn.Parameter(torch.zeros(1)), "grad_dtype"):
        return f"torch {torch.__version__} has no Tensor.grad_dtype (fp32 parameters with bf16 gradients)"
    return None


PRECISIONS: tuple[Precision, ...] = (
    Precision("fp32", description="no mixed precision: every tensor fp32"),
    Precision(
        "bf16",
        # FSDP1 reduces in bf16 (MixedPrecision's reduce_dtype, as its documentation's example);
        # FSDP2 reduces in fp32, as torchtitan configures MixedPrecisionPolicy
        fsdp1=(("param_dtype", torch.bfloat16), ("reduce_dtype", torch.bfloat16)),
        fsdp2=(("param_dtype", torch.bfloat16), ("reduce_dtype", torch.float32)),
        description="the wrapper computes in bf16 over fp32 parameters",
    ),
    Precision(
        "bf16_reduce",
        # every dtype of the setting low: FSDP2 reduces gradients in bf16 too, FSDP1 also keeps
        # its buffers in bf16 for compute (MixedPrecision's buffer_dtype)
        fsdp1=(
            ("param_dtype", torch.bfloat16),
            ("reduce_dtype", torch.bfloat16),
            ("buffer_dtype", torch.bfloat16),
        ),
        fsdp2=(("param_dtype", torch.bfloat16), ("reduce_dtype", torch.bfloat16)),
        description="the wrapper computes and reduces in bf16 (FSDP1: buffers too) over fp32 parameters",
    ),
    Precision(
        "fp16_amp",
        autocast=torch.float16,
        loss_scale=LOSS_SCALE,
        description="fp16 autocast with loss scaling (GradScaler; ShardedGradScaler for sharded "
        "gradients), the scaler's state in the checkpoint",
        unavailable=_no_cpu_fp16_autocast,
    ),
    Precision(
        "fp16_mp",
        # FSDP's fp16 recipe: the wrapper computes in fp16, a ShardedGradScaler scales the loss
        fsdp1=(("param_dtype", torch.float16), ("reduce_dtype", torch.float16)),
        fsdp2=(("param_dtype", torch.float16), ("reduce_dtype", torch.float32)),
        loss_scale=LOSS_SCALE,
        description="the wrapper computes in fp16 over fp32 parameters, with ShardedGradScaler",
    ),
    # fp32 parameters with bf16 gradients: the optimizers that step them build state from the
    # gradient in bf16 (SGD's momentum, Rprop's step sizes, Adafactor's factors); Adam's family and
    # RMSprop cannot step them (optim/builtin.py), and the wrappers drop or refuse grad_dtype
    # (layout.keeps_grad_dtype)
    Precision(
        "bf16_grads",
        grads=torch.bfloat16,
        description="fp32 parameters with bf16 gradients (Tensor.grad_dtype): state an optimizer builds "
        "from the gradient is bf16",
        unavailable=_no_grad_dtype,
    ),
    Precision(
        "bf16_pure",
        params=torch.bfloat16,
        description="the model itself in bf16: parameters, buffers, gradients and optimizer state",
    ),
)

"""The precisions the matrix has built in. A new one is a Precision here (or in a module of its
own) and its line in conformance/precision/registry.py; from outside the package, `register`
in a pytest plugin (tests/new_precision_plugin.py)."""

from __future__ import annotations

import torch

from conformance.precision.base import Precision

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
)

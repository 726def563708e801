"""A new precision as a contributor writes one: a module that defines a Precision and registers
it (here by `-p tests.new_precision_plugin`; in the package, by its line in
conformance/precision/registry.py). bf16r32: bf16 compute with fp32 gradient reduction on both
FSDP generations (the built-in bf16 reduces in bf16 under FSDP1). It joins the mixed-precision
slices (the round trip's and hygiene's), DDP refuses it as it refuses every precision that casts,
the ranks import this module too, and nothing else of the suite is edited."""

from __future__ import annotations

import torch

from conformance.precision.base import Precision
from conformance.precision.registry import register

BF16_REDUCE_FP32 = (("param_dtype", torch.bfloat16), ("reduce_dtype", torch.float32))

PRECISION = register(
    Precision(
        "bf16r32",
        fsdp1=BF16_REDUCE_FP32,
        fsdp2=BF16_REDUCE_FP32,
        description="bf16 compute, fp32 gradient reduction, fp32 parameters",
    )
)

"""What a precision axis value is: how each sharded wrapper's own mixed-precision setting is
configured for it. The parameters the model and the checkpoint hold stay fp32 in every value
here: a wrapper casts them for compute and communication only, and a checkpoint must hold the
fp32 weights (the hygiene check)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# keyword arguments of a wrapper's mixed-precision setting, as (name, dtype) pairs
Dtypes = tuple[tuple[str, torch.dtype], ...]


@dataclass(frozen=True)
class Precision:
    """name: the axis value, a word of every cell id (left out of it for the default, fp32).
    fsdp1: the keyword arguments of FSDP1's MixedPrecision (None: no mixed precision).
    fsdp2: those of FSDP2's MixedPrecisionPolicy (None: none). description: what it casts.
    A wrapper without a mixed-precision setting (DDP) refuses a value that has one."""

    name: str
    fsdp1: Dtypes | None = None
    fsdp2: Dtypes | None = None
    description: str = ""

    @property
    def mixed(self) -> bool:
        """Whether a wrapper casts anything for it (a wrapper with no such setting refuses it)."""
        return self.fsdp1 is not None or self.fsdp2 is not None

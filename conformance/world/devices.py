"""Which GPUs a process of ours may use. Every xdist worker sees every GPU: a cell's backend
depends on the GPUs the machine has, never on the worker it lands on (runner.cell_backend)."""

from __future__ import annotations

import os
from collections.abc import Mapping


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else every one torch sees."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]

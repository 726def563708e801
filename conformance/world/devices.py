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


def process_group_backend(backend: str) -> str:
    """What a world's ranks give init_process_group for a cell's backend. nccl worlds get a CPU
    backend beside it, "cpu:gloo,cuda:nccl", as the DCP async-save recipe's script does: DCP's
    async_save refuses a process group without one ("A CPU backend must be enabled for async
    save; try initializing process group with 'cpu:gloo,cuda:nccl'", torch 2.11 on an H200,
    where the dcp_async cells had read as the strategy's error), and torchtitan initialises so
    when async checkpointing is on. Collectives on CUDA tensors still go through nccl."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend

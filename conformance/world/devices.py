"""Which GPUs a process of ours may use. Under pytest-xdist the visible GPUs are split
between the workers: each worker's worlds see only its own block (CUDA_VISIBLE_DEVICES, set
before any of its worlds start), so two workers never put ranks on the same GPU."""

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


def worker_gpus(gpus: list[str], worker: int, workers: int) -> list[str]:
    """Worker `worker` of `workers`'s contiguous block of `gpus` (the first blocks take one
    more when they do not divide evenly; a worker past the GPUs gets none)."""
    if not 0 <= worker < workers:
        raise ValueError(f"worker {worker} of {workers}")
    base, extra = divmod(len(gpus), workers)
    start = worker * base + min(worker, extra)
    return gpus[start : start + base + (1 if worker < extra else 0)]


def xdist_worker(workerinput: Mapping[str, object]) -> tuple[int, int]:
    """(index, count) of an xdist worker, from its workerinput ("gw3" -> 3)."""
    return int(str(workerinput["workerid"]).removeprefix("gw")), int(str(workerinput["workercount"]))

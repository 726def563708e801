"""Run metadata for results.json."""

from __future__ import annotations

import datetime
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

import conformance


def suite_commit() -> str | None:
    root = Path(conformance.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def cpu() -> dict[str, Any]:
    """The host's CPU as far as outcomes depend on it: its model, and whether oneDNN has fp16 and
    bf16 kernels on it (DeepSpeed's CPU accelerator takes fp16 only where they exist, so a
    DeepSpeed fp16 cell passes on one host and skips on another). None where torch cannot say."""

    def probe(name: str) -> bool | None:
        try:
            return bool(getattr(torch.ops.mkldnn, name)())
        except (AttributeError, RuntimeError):
            return None

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "model": model,
        "onednn_fp16": probe("_is_mkldnn_fp16_supported"),
        "onednn_bf16": probe("_is_mkldnn_bf16_supported"),
    }


def cpu_words(env: dict[str, Any]) -> str:
    """The CPU of a run's metadata in a few words ("" for a run that did not record it)."""
    host = env.get("cpu") or {}
    if not host:
        return ""
    fp16 = {True: "yes", False: "no", None: "unknown"}[host.get("onednn_fp16")]
    return f"CPU {host.get('model')} (oneDNN fp16 kernels: {fp16})"


def environment(
    *,
    backend: str,
    world_sizes: list[int],
    matrix: str,
    args: list[str],
    hypothesis: dict[str, Any] | None = None,
    strategies: dict[str, dict[str, str | None]] | None = None,
    descriptions: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The run's metadata. `strategies`: each registered strategy's required frameworks and
    their installed versions (None: not installed), also in `variant.frameworks`. `series` names what makes runs comparable (hardware kind, backend);
    `variant` the exact versions within a series. The flat fields repeat them for readers of
    schema 1 that came first."""
    cuda = torch.cuda.is_available()
    nccl = None
    if cuda and torch.distributed.is_nccl_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    # auto: nccl for the cells the GPUs hold, gloo beyond them
    hardware = "cuda" if backend in ("nccl", "auto") and cuda else "cpu"
    device = torch.cuda.get_device_name(0) if hardware == "cuda" else "cpu"
    device_count = torch.cuda.device_count() if hardware == "cuda" else 1
    variant = {
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "cuda": torch.version.cuda if cuda else None,
        "nccl": nccl,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu(),
        "device": device,
        "device_count": device_count,
        "frameworks": {dist: v for versions in (strategies or {}).values() for dist, v in versions.items()},
    }
    return {
        "series": {"hardware": hardware, "backend": backend},
        "variant": variant,
        "hypothesis": hypothesis or {},
        "strategies": strategies or {},
        "strategy_descriptions": descriptions or {},  # what each registered strategy runs, and how
        "suite_version": conformance.__version__,
        "suite_commit": suite_commit(),
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **variant,
        "backend": backend,
        "world_sizes": sorted(world_sizes),
        "matrix": matrix,
        "pytest_args": args,
        "argv": sys.argv,
    }


def supplement_sentences(env: dict[str, Any]) -> list[str]:
    """One sentence per addition to a published table (`supplements`, publish --add,
    conformance.versions.supplement): what it added and replaced, the pytest arguments that
    chose its cells, the suite commit and time it ran at. matrix.md and matrix.html say these."""
    return [
        f"Cells added later without re-running the rest: {s.get('added')} added and "
        f"{s.get('replaced')} replaced by a run of `{' '.join(s.get('selection') or [])}` at "
        f"suite {(s.get('suite_commit') or 'unknown')[:12]}, {s.get('time_utc')}."
        for s in env.get("supplements") or []
    ]


def partial_sentences(env: dict[str, Any]) -> list[str]:
    """The warning that leads a partial run's matrix.md and matrix.html (`partial`: a run that
    was interrupted, stopped early or given a selection): what ran, of what, and why it is not
    the whole matrix. A complete run's say nothing."""
    partial = env.get("partial")
    if not partial:
        return []
    of = f" of {partial['collected']} collected" if partial.get("collected") else ""
    return [
        f"PARTIAL RUN: {partial.get('cells')} cells{of}, not the whole `{env.get('matrix')}` matrix "
        f"({'; '.join(partial.get('why') or [])}). Read nothing here as the matrix's answer."
    ]

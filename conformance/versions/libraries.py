"""Each checkpoint library the adapters test, pinned in one place: its requirement, the oldest
torch it installs beside, whether it goes without its own requirements, and how it is built.

`python -m conformance libraries` prints the pip commands that install them beside this
python's torch; `--install` runs them. The README, `.ci/run` and every publish venv
(conformance.versions.venv) install from here, so a pin changes in this file alone."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Library:
    """A checkpoint library the adapters test: its requirement, the oldest torch it installs
    beside (an older venv goes without it: its rows are skips that name it) and the first it does
    not take where it caps torch (below_torch: a newer venv goes without it too), and whether it
    installs without its own requirements (what its checkpoint code imports is listed too).
    build_env: for one that compiles against the venv's torch, the variables its build reads:
    it is built from source with them, without build isolation (an isolated build would pull
    another torch) and without pip's cache (a wheel built against another venv's torch)."""

    requirement: str
    oldest_torch: tuple[int, int]
    no_deps: bool = False
    below_torch: tuple[int, int] | None = None  # the first torch it does not take (its own cap)
    build_env: tuple[tuple[str, str], ...] = ()


# torchtitan without its own requirements: they pull datasets, tensorboard, wandb, torchdata and
# more; its checkpointer and optimizer containers import torch, tyro and spmd_types only (tried
# with torch 2.13 and 2.15)
LIBRARY_PACKAGES: dict[str, Library] = {
    "torch-checkpointing": Library("torch_checkpointing==0.1.1", (2, 11)),
    "transformers": Library("transformers==5.24.0", (2, 9)),  # it takes torch >= 2.6
    "peft": Library("peft==0.21.2", (2, 9)),  # beside transformers, which it requires
    # it requires torch >=2.10,<2.14 (and pulls boto3, google-cloud-storage for remote checkpoints)
    "ai2-olmo-core": Library("ai2-olmo-core==3.0.0", (2, 10), below_torch=(2, 14)),
    "tyro": Library("tyro>=0.9", (2, 13)),
    "torchtitan": Library("torchtitan==0.3.0", (2, 13), no_deps=True),
    "spmd-types": Library("spmd_types==0.2.3", (2, 13), no_deps=True),  # torchtitan 0.3.0 pins it
    # verl without its own requirements: it caps transformers below 5.11 (ours is 5.24.0) and pulls
    # wandb, tensorboard, torchdata, hydra-core, pylatexenc, pybind11; its checkpoint manager's
    # import (verl/__init__.py imports ray and tensordict; verl.utils.checkpoint imports its engines,
    # datasets, PIL, codetiming, omegaconf) needs the lines after it. Its base requirements name no
    # torch; its "fsdp" and "cpu" extras pin torch==2.11.0 (tried with torch 2.13)
    "verl": Library("verl==0.9.1", (2, 11), no_deps=True),
    "ray": Library("ray==2.60.0", (2, 11)),
    "omegaconf": Library("omegaconf>=2.3", (2, 11)),
    "datasets": Library("datasets>=4.0", (2, 11)),
    "pillow": Library("pillow", (2, 11)),
    "codetiming": Library("codetiming", (2, 11)),
    # tensordict's own requirements, but pyvers (which pins packaging<26) without its own
    "cloudpickle": Library("cloudpickle", (2, 11)),
    "orjson": Library("orjson", (2, 11)),
    "importlib-metadata": Library("importlib_metadata", (2, 11)),
    "tensordict": Library("tensordict==0.10.0", (2, 11), no_deps=True),
    "pyvers": Library("pyvers==0.1.0", (2, 11), no_deps=True),
    # NeMo Automodel without its own requirements: it pins transformers==5.18.0 (ours is 5.24.0) and
    # megatron-fsdp==0.5.0, and pulls quack-kernels, nvidia-cutlass-dsl, cuda-python, triton, torchao,
    # flashoptim, mistral-common, tiktoken, torchdata. Its checkpoint code imports torch,
    # transformers, safetensors, huggingface_hub, fsspec and yaml, all of which transformers'
    # requirements install. It requires torch>=2.8 (async save >=2.9); tried with torch 2.13 only
    "nemo-automodel": Library("nemo-automodel==0.7.0", (2, 13), no_deps=True),
    # megatron-core requires torch>=2.6, numpy, packaging (its extras pull TE, apex-like CUDA stacks:
    # not installed); megatron-fsdp torch, einops, packaging. Installed and run beside torch 2.13 and 2.15
    "megatron-core": Library("megatron-core==0.16.1", (2, 13)),
    "megatron-fsdp": Library("megatron-fsdp==0.6.1", (2, 13)),
    # its CPU backend's shared-memory op prebuilt (conformance/adapters/deepspeed.py)
    "deepspeed": Library("deepspeed==0.19.8", (2, 13), build_env=(("DS_BUILD_SHM_COMM", "1"),)),
}


def beside(version: str) -> list[Library]:
    """The libraries that install beside torch `version` (2.13.0, 2.13.0+cpu)."""
    major_minor = tuple(int(part) for part in version.split("+")[0].split(".")[:2])
    return [
        lib
        for lib in LIBRARY_PACKAGES.values()
        if major_minor >= lib.oldest_torch and (lib.below_torch is None or major_minor < lib.below_torch)
    ]


def libraries_for(version: str, *, no_deps: bool = False) -> list[str]:
    """The requirements of the checkpoint libraries that install beside torch `version`: those
    installed with their requirements, or (no_deps) those installed without."""
    return [lib.requirement for lib in beside(version) if lib.no_deps == no_deps and not lib.build_env]


def built_libraries(version: str) -> list[Library]:
    """The checkpoint libraries beside torch `version` that are built against it (build_env)."""
    return [lib for lib in beside(version) if lib.build_env]


def pip_groups(version: str) -> list[tuple[list[str], dict[str, str]]]:
    """How the libraries beside torch `version` go to pip, in order: (pip install's arguments,
    the extra environment of that install). Those with their requirements in one install, those
    without them in another, each built one alone with its build variables."""
    out: list[tuple[list[str], dict[str, str]]] = []
    if libraries_for(version):
        out.append((libraries_for(version), {}))
    if libraries_for(version, no_deps=True):
        out.append((["--no-deps", *libraries_for(version, no_deps=True)], {}))
    for lib in built_libraries(version):
        out.append((["--no-cache-dir", "--no-build-isolation", lib.requirement], dict(lib.build_env)))
    return out


def install_commands(version: str, python: str) -> list[tuple[list[str], dict[str, str]]]:
    """The pip commands (argv, extra environment) that install the libraries beside torch
    `version` into `python`'s environment, in order."""
    return [([python, "-m", "pip", "install", *args], env) for args, env in pip_groups(version)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--install", action="store_true", help="run the commands (default: print them)")


def main(args: argparse.Namespace) -> int:
    """Print (or with --install, run) the commands for this python's torch; exit 1 on a failed
    install, naming the command."""
    import torch

    version = torch.__version__
    commands = install_commands(version, sys.executable)
    if not commands:
        print(f"no checkpoint library installs beside torch {version}")
    for argv, env in commands:
        shown = " ".join([*(f"{k}={v}" for k, v in env.items()), shlex.join(argv)])
        print(shown, flush=True)
        if args.install:
            code = subprocess.run(argv, env={**os.environ, **env}).returncode
            if code:
                print(f"failed (exit {code}): {shown}", file=sys.stderr)
                return 1
    return 0

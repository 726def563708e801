"""DeepSpeed's Muon with an auxiliary Adam (deepspeed/runtime/zero/muon/original_muon.py), the
`muon_aux` value of the optimizer axis (conformance/optim/muon.py): the library's class lives with
the adapters, where code may name a library, and the axis value calls `missing` and `make`."""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

DESCRIPTION = (
    "DeepSpeed's SingleDeviceMuonWithAuxAdam: one optimizer, a Muon group of the 2-D weights "
    "(momentum_buffer) and an Adam group of the rest (exp_avg, exp_avg_sq, an int step), told "
    "apart by each group's use_muon flag"
)
DEEPSPEED = "deepspeed"


def missing() -> str | None:
    """Why DeepSpeed's Muon cannot be built here (asked without importing deepspeed: importing it
    picks its accelerator in the process that imports it)."""
    if importlib.util.find_spec(DEEPSPEED) is None:
        return "deepspeed is not installed (its Muon: deepspeed.runtime.zero.muon.original_muon)"
    return None


@functools.cache
def _eager_step_class() -> type[torch.optim.Optimizer]:
    from deepspeed.runtime.zero.muon.original_muon import SingleDeviceMuonWithAuxAdam

    class EagerSingleDeviceMuonWithAuxAdam(SingleDeviceMuonWithAuxAdam):  # type: ignore[misc,valid-type]
        """DeepSpeed's class, its step under torch.compiler.set_stance("force_eager"): its
        muon_update is decorated with torch.compile, whose inductor build on the CPU takes minutes
        per world (cells hung at the case timeout) and raced between two ranks over one cache
        directory ("file too short"). The same Python code runs, uncompiled; its state_dict and
        load_state_dict are the library's own."""

        @torch.no_grad()
        def step(self, closure: object = None) -> object:  # type: ignore[override]
            with torch.compiler.set_stance("force_eager"):
                return super().step(closure)

    return EagerSingleDeviceMuonWithAuxAdam


def make(groups: list[dict], **impl: bool) -> torch.optim.Optimizer:
    """SingleDeviceMuonWithAuxAdam over [matrices, rest], each group with its `use_muon` flag and
    the hyperparameters its docstring's example gives (Muon lr 0.02 momentum 0.95; Adam
    betas (0.9, 0.95), eps 1e-10, weight decay 0.01)."""
    matrices, rest = groups
    if all(p.device.type == "cpu" for g in groups for p in g["params"]):
        # its Newton-Schulz dtype asks the accelerator, which otherwise looks for CUDA
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    return _eager_step_class()(
        [
            {**matrices, "use_muon": True, "lr": 0.02, "momentum": 0.95, "weight_decay": 0.01},
            {**rest, "use_muon": False, "lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-10, "weight_decay": 0.01},
        ]
    )

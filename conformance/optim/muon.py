"""Muon as it is used: on the 2-D weight matrices, with AdamW on every other parameter (biases,
norms, embeddings), as torch.optim.Muon's documentation says ("Muon is an optimizer for 2D
parameters of neural network hidden layers. Other parameters, such as bias, and embedding, should
be optimized by a standard method such as AdamW") and its example splits them (`p.ndim == 2`: the
output layer's weight goes to Muon there, where Keller Jordan's recipe gives it to Adam). The
harness hands such an optimizer two groups (Optimizer.matrices, conformance.training): the
matrices, then the rest.

muon_aux: one optimizer with two kinds of param groups, DeepSpeed's SingleDeviceMuonWithAuxAdam
(deepspeed/runtime/zero/muon/original_muon.py: groups flagged `use_muon=True` step by Muon, those
flagged False by its internal Adam with decoupled weight decay), built as its docstring's example
builds MuonWithAuxAdam. The single-device class: every rank steps every parameter it holds, so its
state is whole on every replica (MuonWithAuxAdam spreads the Muon matrices over the ranks of a
data-parallel world and all-gathers the parameters after each step).

muon_adamw: two optimizers, torch.optim.Muon over the matrices and torch.optim.AdamW over the rest,
built and stepped as Muon's docstring example does (an OptimizerList, conformance.optim.several)."""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

from conformance.optim.base import Optimizer
from conformance.optim.several import OptimizerList

DEEPSPEED = "deepspeed"


def _deepspeed_missing() -> str | None:
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


def _muon_with_aux_adam(groups: list[dict], **impl: bool) -> torch.optim.Optimizer:
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


def _torch_muon_missing() -> str | None:
    return None if hasattr(torch.optim, "Muon") else f"torch {torch.__version__} has no torch.optim.Muon"


def _muon_and_adamw(groups: list[dict], **impl: bool) -> OptimizerList:
    """torch.optim.Muon over the matrices and torch.optim.AdamW over the rest, with the
    hyperparameters of Muon's docstring example (Muon lr 0.02, momentum 0.95; AdamW lr 3e-4,
    weight decay 0.01)."""
    matrices, rest = groups
    return OptimizerList(
        (
            torch.optim.Muon([matrices], lr=0.02, momentum=0.95, **impl),
            torch.optim.AdamW([rest], lr=3e-4, weight_decay=0.01, **impl),
        )
    )


OPTIMIZERS: tuple[Optimizer, ...] = (
    Optimizer(
        "muon_aux",
        _muon_with_aux_adam,
        "DeepSpeed's SingleDeviceMuonWithAuxAdam: one optimizer, a Muon group of the 2-D weights "
        "(momentum_buffer) and an Adam group of the rest (exp_avg, exp_avg_sq, an int step), told "
        "apart by each group's use_muon flag",
        takes_groups=False,
        matrices=True,
        covered_late=True,
        low_precision_grads=False,
        unavailable=_deepspeed_missing,
    ),
    Optimizer(
        "muon_adamw",
        _muon_and_adamw,
        "two optimizers, torch.optim.Muon on the 2-D weights (momentum_buffer) and AdamW on the rest "
        "(exp_avg, exp_avg_sq, a 0-dim step): each one's state and param groups in one checkpoint",
        takes_groups=False,
        matrices=True,
        optimizers=2,
        covered_late=True,
        low_precision_grads=False,
        unavailable=_torch_muon_missing,
    ),
)

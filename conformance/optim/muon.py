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

import importlib

import torch

from conformance.optim.base import Optimizer
from conformance.optim.several import OptimizerList

# DeepSpeed's class and its availability live with the adapters (shared code names no library)
LIBRARY = "conformance.adapters.muon_aux"


def _library_missing() -> str | None:
    return importlib.import_module(LIBRARY).missing()


def _library_make(groups: list[dict], **impl: bool) -> torch.optim.Optimizer:
    return importlib.import_module(LIBRARY).make(groups, **impl)


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
        _library_make,
        importlib.import_module(LIBRARY).DESCRIPTION,
        takes_groups=False,
        matrices=True,
        covered_late=True,
        low_precision_grads=False,
        unavailable=_library_missing,
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

"""The optimizers the matrix has built in: every stateful optimizer of torch.optim that trains on
dense gradients (SparseAdam needs sparse ones; Muon, which takes only 2-D parameters, is in
conformance/optim/muon.py, with AdamW beside it on the rest as it is used). A new one is an Optimizer here (or in a module of its own) and its line in
conformance/optim/registry.py; from outside the package, `register` in a pytest plugin
(tests/new_optimizer_plugin.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from conformance.optim.base import Optimizer


def _torch(name: str, **hyper: Any) -> Callable[..., torch.optim.Optimizer]:
    """torch.optim.<name> over the groups, with these hyperparameters and an implementation flag."""

    def make(groups: list[dict], **impl: bool) -> torch.optim.Optimizer:
        return getattr(torch.optim, name)(groups, **hyper, **impl)

    return make


def _missing(name: str) -> Callable[[], str | None]:
    def why() -> str | None:
        return None if hasattr(torch.optim, name) else f"torch {torch.__version__} has no torch.optim.{name}"

    return why


def _adamw(groups: list[dict], **impl: bool) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.01, **impl)


FOREACH, FUSED = ("foreach",), ("foreach", "fused")

OPTIMIZERS: tuple[Optimizer, ...] = (
    Optimizer(
        "sgd",
        _torch("SGD", lr=1e-2, momentum=0.9),
        "a momentum buffer per parameter, shaped like it",
        impls=FUSED,
    ),
    Optimizer(
        "adam",
        _torch("Adam", lr=1e-2),
        "two moments shaped like the parameter and a 0-dim step",
        impls=FUSED,
        low_precision_grads=False,
    ),
    Optimizer(
        "adamw", _adamw, "Adam's state, decoupled weight decay", impls=FUSED, low_precision_grads=False
    ),
    Optimizer(
        "nadam",
        _torch("NAdam", lr=1e-2),
        "Adam's moments and a 0-dim mu_product",
        impls=FOREACH,
        low_precision_grads=False,
    ),
    Optimizer(
        "radam",
        _torch("RAdam", lr=1e-2),
        "Adam's moments, rectified",
        impls=FOREACH,
        low_precision_grads=False,
    ),
    Optimizer(
        "adamax",
        _torch("Adamax", lr=1e-2),
        "exp_avg and the infinity norm exp_inf",
        impls=FOREACH,
        low_precision_grads=False,
    ),
    Optimizer("adagrad", _torch("Adagrad", lr=1e-2), "a sum of squares from the first step", impls=FUSED),
    Optimizer(
        "rmsprop",
        _torch("RMSprop", lr=1e-3, momentum=0.9, centered=True),
        "square_avg, momentum_buffer and grad_avg (centered)",
        impls=FOREACH,
        low_precision_grads=False,
    ),
    Optimizer("adadelta", _torch("Adadelta", lr=1.0), "square_avg and acc_delta", impls=FOREACH),
    Optimizer(
        "rprop", _torch("Rprop", lr=1e-2), "a per-element step size and the previous gradient", impls=FOREACH
    ),
    Optimizer(
        "asgd",
        _torch("ASGD", lr=1e-2, t0=1.0),
        "0-dim eta and mu beside the parameter-shaped average ax",
        impls=FOREACH,
    ),
    Optimizer(
        "adafactor",
        _torch("Adafactor", lr=1e-2),
        "factored state: row_var (rows, 1) and col_var (1, cols) of a matrix, not its shape",
        impls=FOREACH,
        unavailable=_missing("Adafactor"),
    ),
    Optimizer(
        "lbfgs",
        _torch("LBFGS", lr=0.1, max_iter=2, history_size=3),
        "state on the first parameter only: ints, floats, lists of flat tensors over every parameter",
        takes_groups=False,
        closure=True,
    ),
)

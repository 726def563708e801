"""A new optimizer as a contributor writes one: a module that defines an Optimizer and registers
it (here by `-p tests.new_optimizer_plugin`; in the package, by its line in
conformance/optim/registry.py). Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
Algorithms"), an optimizer users bring from outside torch.optim: one momentum tensor per
parameter and the sign of an interpolation as the update. It joins the optimizers slice of every
profile; the ranks import this module too, and nothing else of the suite is edited."""

from __future__ import annotations

import torch

from conformance.optim.base import Optimizer
from conformance.optim.registry import register


class Lion(torch.optim.Optimizer):
    def __init__(self, params: object, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.99)) -> None:
        super().__init__(params, {"lr": lr, "betas": betas})

    @torch.no_grad()
    def step(self, closure: object = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.add_(torch.sign(exp_avg * beta1 + p.grad * (1 - beta1)), alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)


LION = register(
    Optimizer(
        "lion",
        lambda groups: Lion(groups, lr=1e-3),
        description="a user's optimizer from outside torch.optim: one momentum tensor, no step count",
    )
)

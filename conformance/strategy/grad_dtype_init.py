"""A workaround as a state-dict API: get/set_state_dict after the optimizer's state is made in
the gradients' dtype (the plain layout's `dsd_sharded_gradinit`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from conformance.strategy.protocol import StateDict
from conformance.strategy.state_apis import DistributedStateDict


@dataclass(frozen=True)
class GradDtypeInitFirst(DistributedStateDict):
    """A workaround, not an API of torch: get/set_state_dict after the optimizer's state is made
    in the gradients' dtype. Their own _init_optim_state makes a fresh optimizer's state by one
    step with zero gradients in the parameter's dtype (torch.zeros_like(param)), which a
    parameter whose grad_dtype differs rejects (finding dsd-init-optim-state-grad-dtype). Here
    the same step runs first, on the same conditions (no state, no gradient) with the learning
    rates 0, but with zero gradients in `param.grad_dtype`, so that _init_optim_state finds
    state and returns: what the load then does to the state is get/set_state_dict's. The step is
    given a closure returning 0 (LBFGS takes none other; every optimizer accepts one)."""

    def get(self, model: nn.Module, optim: torch.optim.Optimizer) -> StateDict:
        self.init_state(optim)
        return super().get(model, optim)

    def set(self, model: nn.Module, optim: torch.optim.Optimizer, state: StateDict) -> None:
        self.init_state(optim)
        super().set(model, optim, state)

    def zero_grad_dtype(self, param: torch.Tensor) -> torch.dtype:
        """The dtype of the zero gradient the first step gets: the parameter's grad_dtype."""
        return getattr(param, "grad_dtype", None) or param.dtype

    def init_state(self, optim: torch.optim.Optimizer) -> None:
        """_init_optim_state's step (torch 2.13, distributed/checkpoint/state_dict.py), with each
        zero gradient in `zero_grad_dtype`."""
        init_optim_state(optim, self.zero_grad_dtype)


def init_optim_state(optim: torch.optim.Optimizer, dtype_of: Callable[[torch.Tensor], torch.dtype]) -> None:
    """A fresh optimizer's state made as _init_optim_state makes it (where it has no state and
    no parameter a gradient): one step on zero gradients of `dtype_of(param)`, learning rates 0."""
    params = [p for group in optim.param_groups for p in group["params"]]
    if optim.state or any(p.grad is not None for p in params):
        return
    for p in params:
        if p.requires_grad:
            p.grad = torch.zeros(p.shape, dtype=dtype_of(p), device=p.device)
    rates = [group["lr"] for group in optim.param_groups if "lr" in group]
    for group in optim.param_groups:
        if "lr" in group:
            group["lr"] = torch.tensor(0.0) if isinstance(group["lr"], torch.Tensor) else 0.0
    optim.step(lambda: torch.zeros(()))
    for group in optim.param_groups:
        if "lr" in group:
            group["lr"] = rates.pop(0)
    optim.zero_grad(set_to_none=True)

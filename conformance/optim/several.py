"""Several torch optimizers trained as one, as torch.optim.Muon's documentation trains Muon with an
AdamW beside it: both zeroed, both stepped, each over its own parameters. An Optimizer whose
`make` returns an OptimizerList is such a value (Optimizer.optimizers > 1).

The checkpoint keeps each optimizer's own state: a state-dict API that takes several optimizers
(get_state_dict / set_state_dict take an iterable of them, as documented) is given the list
itself, which is a tuple of the torch optimizers; one that takes one optimizer is called once per
optimizer (StateApi.takes_optimizers). The harness's snapshot reads the optimizers one by one
(TrainState.holders), their param groups numbered on in this order. An LR scheduler is one per
optimizer (SchedulerList), and a GradScaler steps each optimizer, then updates once (the AMP
recipe for several optimizers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class OptimizerList(tuple):  # type: ignore[type-arg]
    """The torch optimizers of one cell, in order; stepped and zeroed together."""

    def step(self, closure: Callable[[], Any] | None = None) -> None:
        if closure is not None:
            raise ValueError("several optimizers take no closure: each would re-evaluate the loss")
        for optim in self:
            optim.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optim in self:
            optim.zero_grad(set_to_none=set_to_none)


class SchedulerList(tuple):  # type: ignore[type-arg]
    """One LR scheduler per optimizer of an OptimizerList, stepped together; its state_dict holds
    each one's by its position."""

    def step(self, *metric: Any) -> None:
        for scheduler in self:
            scheduler.step(*metric)

    def state_dict(self) -> dict[str, Any]:
        return {str(i): scheduler.state_dict() for i, scheduler in enumerate(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for i, scheduler in enumerate(self):
            scheduler.load_state_dict(state[str(i)])


def optimizers_of(optim: Any) -> tuple[torch.optim.Optimizer, ...]:
    """The torch optimizers an optimizer object stands for: an OptimizerList's, or itself."""
    return tuple(optim) if isinstance(optim, OptimizerList) else (optim,)


def holders_of(optim: Any) -> tuple[torch.optim.Optimizer, ...]:
    """TrainState.holders for an optimizer object: an OptimizerList's optimizers, each holding its
    own state; none for one torch optimizer (it holds its state itself)."""
    return tuple(optim) if isinstance(optim, OptimizerList) else ()


def scheduler_over(make: Callable[[torch.optim.Optimizer], Any], optim: Any) -> Any:
    """The scheduler `make` builds over an optimizer, or a SchedulerList of one per optimizer."""
    if isinstance(optim, OptimizerList):
        return SchedulerList(make(o) for o in optim)
    return make(optim)


def each_state(optim: Any, get: Callable[[torch.optim.Optimizer], Any]) -> Any:
    """What `get` gives of each optimizer: of one, its value; of an OptimizerList, a list of them
    in its order (a state-dict API that takes one optimizer, called once per optimizer)."""
    return [get(o) for o in optim] if isinstance(optim, OptimizerList) else get(optim)


def load_each(optim: Any, saved: Any, put: Callable[[torch.optim.Optimizer, Any], None]) -> None:
    """`put` each optimizer's saved value into it (what each_state gave, in the same order)."""
    if not isinstance(optim, OptimizerList):
        put(optim, saved)
        return
    if not isinstance(saved, list) or len(saved) != len(optim):
        raise ValueError(f"a checkpoint of {len(optim)} optimizers holds {type(saved).__name__} instead")
    for one, value in zip(optim, saved):
        put(one, value)

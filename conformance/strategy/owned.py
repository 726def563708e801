"""Optional protocol: a strategy whose framework builds the optimizer and the LR scheduler.

Some checkpoint managers own the training objects they save. torchtitan's CheckpointManager
takes an `OptimizersContainer` and an `LRSchedulersContainer` that its trainer builds from a
config, and its checkpoint holds their state dicts (flattened, keyed by parameter name), not a
torch optimizer's. A strategy for such a library has

    def own_training(self, state: TrainState, ctx: RankContext) -> TrainState

The harness calls it on every state it builds (the trained one and every fresh one), right
after `wrap` and after building the cell's optimizer (and scheduler) over the wrapped model.
The strategy returns the state its framework trains: the same model; the framework's
optimizer, built to the harness's description (the class and `param_groups` of `state.optim`:
hyperparameters and parameters per group); the framework's scheduler, or None; and, when the
optimizer is a container, `holders`: the torch optimizers inside it. The harness then trains
with `optim.step()` / `optim.zero_grad()` / `scheduler.step()` and reads the optimizer state
from the holders (its own view, never the framework's state_dict), as it reads FSDP's shards.

What the harness asks of the returned state (a wrong one is the cell's error and says what to
do): a TrainState holding the same model object, whose torch optimizers (the holders, or the
optimizer itself) optimize parameters of that model only, each once, and every trainable one.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from conformance.strategy.protocol import TrainState
from conformance.world import RankContext
from conformance.world.attribution import code_under_test


class OwnedTrainingError(TypeError):
    """own_training returned a state the checks could not read truthfully."""


def _name_of(model: nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in model.named_parameters()}


def ownership_problem(given: TrainState, owned: Any) -> str:
    """Why `owned` cannot stand for `given` ("" when it can)."""
    if not isinstance(owned, TrainState):
        return f"own_training returned a {type(owned).__name__}; return a TrainState (conformance.strategy.protocol)"
    if owned.model is not given.model:
        return "own_training returned another model; keep state.model (wrap is where the model changes)"
    names = _name_of(owned.model)
    seen: dict[int, int] = {}
    for optim in owned.optimizers:
        for group in optim.param_groups:
            for param in group["params"]:
                seen[id(param)] = seen.get(id(param), 0) + 1
    strangers = [k for k in seen if k not in names]
    if strangers:
        return (
            f"{len(strangers)} parameter(s) of the returned optimizers are not the model's: build the "
            "framework's optimizer over state.model's parameters (and list a container's torch "
            "optimizers in TrainState.holders)"
        )
    twice = sorted(names[k] for k, n in seen.items() if n > 1)
    if twice:
        return f"parameters optimized twice: {twice[:4]}; a container's holders must not overlap"
    missing = sorted(
        name for name, p in owned.model.named_parameters() if p.requires_grad and id(p) not in seen
    )
    if missing:
        return (
            f"trainable parameters no returned optimizer holds: {missing[:4]}; when the optimizer is a "
            "container, list the torch optimizers in it as TrainState.holders"
        )
    return ""


def owned_state(strategy: Any, state: TrainState, ctx: RankContext) -> TrainState:
    """The state the strategy's framework trains: `state` itself unless the strategy has
    `own_training`, whose result is checked (code under test: a wrong one is the cell's error)."""
    own = getattr(strategy, "own_training", None)
    if not callable(own):
        return state
    with code_under_test("strategy.own_training"):
        owned = own(state, ctx)
        problem = ownership_problem(state, owned)
        if problem:
            raise OwnedTrainingError(problem)
    return owned

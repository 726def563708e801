"""The strategy protocol and the parts the built-in strategies are composed from."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from conformance.world import RankContext
from conformance.world.attribution import harness_code

StateDict = dict[str, Any]


class StateView(Protocol):
    """A framework's documented view of live state that lives where the harness cannot read it
    by parameter name (DeepSpeed's ZeRO keeps the fp32 master weights and the optimizer state
    in flat partitions keyed by no parameter, and stage 3 partitions the parameters too).

    Like a torch optimizer it has `state` (a model parameter -> its entries, whole, as the
    framework's accessors assemble them) and `param_groups` (hyperparameters, "params": the
    model's parameters); `parameters_by_name()` gives every parameter of the model, whole, by
    its name in `model.named_parameters()`. Reading it may be a collective: every rank reads
    it, in the same order. Its reads are code under test (an accessor that raises after a load
    is the cell's error)."""

    @property
    def state(self) -> Mapping[Any, Mapping[str, Any]]: ...

    @property
    def param_groups(self) -> list[dict[str, Any]]: ...

    def parameters_by_name(self) -> Mapping[str, torch.Tensor]: ...


def is_state_view(holder: object) -> bool:
    """Whether a holder is a StateView (asked of its type: reading `state` may be a collective)."""
    return callable(getattr(type(holder), "parameters_by_name", None))


class Engine(Protocol):
    """A framework's engine that owns the training step (DeepSpeed's `DeepSpeedEngine`): the
    harness trains with `loss_fn(engine(x), y)`, `engine.backward(loss)`, `engine.step()` (which
    steps the optimizer and the LR scheduler and zeroes the gradients) instead of the model's
    forward, `loss.backward()` and `optim.step()`."""

    def __call__(self, *inputs: Any) -> Any: ...

    def backward(self, loss: torch.Tensor) -> Any: ...

    def step(self) -> Any: ...


@dataclass
class TrainState:
    """What a checkpoint must carry: the wrapped model, its optimizer, an LR scheduler when the
    cell has one and a GradScaler when its precision scales the loss (their state_dict()s are
    part of the checkpoint too: `stateful`).

    holders: when `optim` is a framework's container of torch optimizers (torchtitan's
    OptimizersContainer), the torch optimizers in it, which hold the state: the harness's own
    snapshot reads these, as it reads FSDP's shards, while training steps `optim`; the torch
    optimizers of an OptimizerList (several optimizers trained together, conformance.optim.several);
    or a StateView when the state lives where no torch optimizer holds it by parameter. Empty for a
    torch optimizer. engine: a framework's Engine that owns the training step, or None
    (conformance.strategy.owned)."""

    model: nn.Module
    optim: torch.optim.Optimizer
    scheduler: Any = None  # an LRScheduler, or a framework's container of them
    holders: tuple[torch.optim.Optimizer | StateView, ...] = ()
    engine: Engine | None = None
    scaler: Any = None  # a GradScaler (torch.amp, or FSDP's ShardedGradScaler), or None

    @property
    def stateful(self) -> dict[str, Any]:
        """The objects beside the model and the optimizer whose state_dict() a checkpoint carries,
        by the key a composed strategy saves each under ("scheduler", "scaler")."""
        return {k: v for k, v in (("scheduler", self.scheduler), ("scaler", self.scaler)) if v is not None}

    @property
    def optimizers(self) -> tuple[torch.optim.Optimizer | StateView, ...]:
        """What holds the optimizer state, for the harness's snapshot."""
        return self.holders or (self.optim,)


@runtime_checkable
class Strategy(Protocol):
    """What a checkpoint strategy must do; every method runs on every rank of the world.

    The harness builds the model, calls `wrap`, builds the optimizer (and scheduler) over the
    wrapped model's parameters, trains, calls `save`; then builds a fresh model (other
    weights), `wrap`s it, builds a fresh optimizer and scheduler, calls `load`, and compares.

    `path` does not exist before `save`: the strategy writes a file or a directory there.

    Optional: `load_before_wrap(model, path, ctx)`. A strategy that has it gets the fresh,
    unwrapped model first, to load weights into before `wrap` (the FSDP tutorial loads the
    full model on rank 0 and wraps with sync_module_states=True).

    Optional: `read_model_state(path) -> dict` for full checkpoints: the model state dict the
    checkpoint holds, read in one process without a process group, as export or inference
    code would consume it (the hygiene check loads it into the plain model, strict=True).
    Beside it, for an export that is not the trained model itself or that has a form of its own:
    `export_of(expected) -> dict`, what the export must hold in the plain model's names (`param/`
    and `buffer/` keys), computed in one process from the saving world's canonical state (an
    adapter merged into its base), and `export_problems(path) -> list[str]`, what keeps the
    export from the form its library's own export of the plain model takes (its files' key set,
    the ties of the model it loads as).

    Optional: `own_training(state, ctx) -> TrainState` for a framework that builds the
    optimizer and the LR scheduler itself (conformance.strategy.owned).

    Optional, for the sanity check of a layout the framework brings itself (Supports.layouts):
    `held(param) -> Tensor`, what of a parameter this rank holds where the framework keeps it
    elsewhere than the parameter's data (a partition it released the data to), and
    `shard_group_size(world_size) -> int`, over how many ranks one copy of the parameters is
    spread (1: each rank holds them whole).
    """

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module: ...

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None: ...

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None: ...


class Wrapper(Protocol):
    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module: ...


class StateApi(Protocol):
    """Optional: `before_wrap(model, state, rank)`, which loads into the unwrapped model.
    Optional: `takes_optimizers = True` where `get` and `set` take an OptimizerList too (several
    optimizers, conformance.optim.several); the cells of several optimizers with any other API are
    unsupported."""

    def get(self, model: nn.Module, optim: torch.optim.Optimizer) -> StateDict: ...

    def set(self, model: nn.Module, optim: torch.optim.Optimizer, state: StateDict) -> None: ...


class Storage(Protocol):
    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None: ...

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict: ...

    def read(self, path: Path) -> StateDict:
        """The saved state in one process, no process group (for full checkpoints)."""
        ...


@dataclass(frozen=True)
class ComposedStrategy:
    """A built-in strategy: wrapper x state-dict API x storage. The scheduler's and the loss
    scaler's own state_dict()s travel beside the model and optimizer, under "scheduler" and
    "scaler" (TrainState.stateful)."""

    wrapper: Wrapper
    api: StateApi
    storage: Storage
    # how the template a storage loads in place into is shaped before the load (the template
    # check: a template of a model that lost a layer, or cast); None: as the API gives it
    shape_template: Callable[[StateDict], StateDict] | None = None

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return self.wrapper.wrap(model, ctx)

    def _state_dict(self, state: TrainState) -> StateDict:
        out = self.api.get(state.model, state.optim)
        for key, holder in state.stateful.items():
            out[key] = holder.state_dict()
        return out

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.storage.save(self._state_dict(state), path, ctx)

    def read_model_state(self, path: Path) -> StateDict:
        return self.storage.read(path)["model"]

    def load_template(self, state: TrainState) -> StateDict:
        """What a storage that loads in place (DCP) loads into: the state dict the fresh model and
        optimizer give through the API, shaped by `shape_template` (the harness's code: what
        escapes it is a harness-error, never the strategy's)."""
        given = self._state_dict(state)
        if self.shape_template is None:
            return given
        with harness_code():
            return self.shape_template(given)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        loaded = self.storage.load(path, ctx, lambda: self.load_template(state))
        self.api.set(state.model, state.optim, loaded)
        for key, holder in state.stateful.items():
            holder.load_state_dict(loaded[key])


@dataclass(frozen=True)
class PreloadingStrategy(ComposedStrategy):
    """A composed strategy whose state-dict API loads into the unwrapped model before `wrap`."""

    def load_before_wrap(self, model: nn.Module, path: Path, ctx: RankContext) -> None:
        loaded = self.storage.load(path, ctx, dict)
        self.api.before_wrap(model, loaded, ctx.rank)  # type: ignore[attr-defined]

"""Broken strategies for the newer axes, each the built-in strategy with one thing done wrong:

- lenient_load: loads through get/set_state_dict with strict=False, so a template that lacks a
  module loads silently less than the checkpoint holds (the template check's missing_module cell
  must catch it; the built-in strategy raises there and passes);
- transposes_factored_state: saves an optimizer state tensor that is not shaped like its parameter
  (Adafactor's row_var and col_var) transposed (the round trip on Adafactor must catch it);
- drops_scaler: saves and loads the model, optimizer and scheduler, but not the GradScaler's
  state, as a checkpoint written before loss scaling came in does (the round trip and the
  resume of an fp16 cell must catch it: the scale and growth tracker stay a fresh scaler's);
- drops_grad_dtype: wraps the plain module by re-creating its parameters, as a wrapper that
  replaces them does, so a grad_dtype set before wrapping is lost and the gradients stay fp32 (the
  training's guard must make the bf16_grads cell the configuration's error, never a pass);
- keeps_state_dtypes (a control, not broken): the built-in strategy, then every loaded optimizer
  state tensor cast back to the dtype it was saved in, the workaround for
  optim-load-casts-grad-dtype-state (its bf16_grads round trip must pass);
- inits_in_param_dtype: the grad_dtype workaround (dsd_sharded_gradinit) making the fresh
  optimizer's state with zero gradients in the parameter's dtype, as _init_optim_state itself does
  (the cell must be an error again: the workaround cannot pass by never reaching the load);
- stale_buffers: saves every buffer as the model was built (a counter back at 0), as a save that
  rebuilds the model state from its config does (the hygiene check, which compares the persistent
  buffers of the plain model it loads into, must catch it on mlp_int_buffer).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

from conformance.case import Case
from conformance.layout.builtin import builtin_strategy
from conformance.strategy.grad_dtype_init import GradDtypeInitFirst
from conformance.strategy.protocol import ComposedStrategy, Strategy, TrainState
from conformance.world import RankContext
from tests.broken import Delegating


@dataclass(frozen=True)
class LenientLoad(ComposedStrategy):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        loaded = self.storage.load(path, ctx, lambda: self.load_template(state))
        set_state_dict(
            state.model,
            state.optim,
            model_state_dict=loaded["model"],
            optim_state_dict=loaded["optim"],
            options=StateDictOptions(strict=False),
        )
        if state.scheduler is not None:
            state.scheduler.load_state_dict(loaded["scheduler"])


def lenient_load(case: Case) -> Strategy:
    built = builtin_strategy(case)
    assert isinstance(built, ComposedStrategy)
    return LenientLoad(built.wrapper, built.api, built.storage)


class TransposesFactoredState(Delegating):
    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        flipped = []
        for param, entry in state.optim.state.items():
            for key, value in list(entry.items()):
                if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape != param.shape:
                    flipped.append((entry, key, value))
                    entry[key] = value.t().contiguous()
        if not flipped:
            raise AssertionError("no optimizer state unlike its parameter to transpose")
        try:
            self.base.save(state, path, ctx)
        finally:
            for entry, key, value in flipped:
                entry[key] = value


def transposes_factored_state(case: Case) -> Strategy:
    return TransposesFactoredState(builtin_strategy(case))  # type: ignore[return-value]


class DropsScaler(Delegating):
    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        scaler, state.scaler = state.scaler, None
        if scaler is None:
            raise AssertionError("the cell has no GradScaler to leave out")
        try:
            self.base.save(state, path, ctx)
        finally:
            state.scaler = scaler

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        scaler, state.scaler = state.scaler, None
        try:
            self.base.load(state, path, ctx)
        finally:
            state.scaler = scaler


def drops_scaler(case: Case) -> Strategy:
    return DropsScaler(builtin_strategy(case))  # type: ignore[return-value]


class StaleBuffers(Delegating):
    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        buffers = [b for _, b in state.model.named_buffers()]
        if not buffers:
            raise AssertionError("the model has no buffer to save stale")
        kept = [b.detach().clone() for b in buffers]
        with torch.no_grad():
            for b in buffers:
                b.zero_()
        try:
            self.base.save(state, path, ctx)
        finally:
            with torch.no_grad():
                for b, value in zip(buffers, kept):
                    b.copy_(value)


def stale_buffers(case: Case) -> Strategy:
    return StaleBuffers(builtin_strategy(case))  # type: ignore[return-value]


class DropsGradDtype(Delegating):
    def wrap(self, model: torch.nn.Module, ctx: RankContext) -> torch.nn.Module:
        model = self.base.wrap(model, ctx)
        for module in model.modules():
            for name, param in list(module.named_parameters(recurse=False)):
                setattr(module, name, torch.nn.Parameter(param.detach().clone()))
        return model


def drops_grad_dtype(case: Case) -> Strategy:
    return DropsGradDtype(builtin_strategy(case))  # type: ignore[return-value]


class IgnoresMixedPrecision(Delegating):
    """Wraps with FSDP2 as if the cell were fp32: the precision's MixedPrecisionPolicy is never
    applied, so the model trains in fp32 (a row that declares a precision it does not pass on)."""

    def wrap(self, model: torch.nn.Module, ctx: RankContext) -> torch.nn.Module:
        from conformance.strategy.wrappers import Fsdp2Wrapper

        return Fsdp2Wrapper().wrap(model, ctx)


def ignores_mixed_precision(case: Case) -> Strategy:
    return IgnoresMixedPrecision(builtin_strategy(case))  # type: ignore[return-value]


@dataclass(frozen=True)
class KeepsStateDtypes(ComposedStrategy):
    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        loaded = self.storage.load(path, ctx, lambda: self.load_template(state))
        self.api.set(state.model, state.optim, loaded)
        for key, holder in state.stateful.items():
            holder.load_state_dict(loaded[key])
        params = [p for group in state.optim.param_groups for p in group["params"]]
        for index, saved in loaded["optim"]["state"].items():
            entry = state.optim.state[params[index]]
            for key, value in saved.items():
                if isinstance(value, torch.Tensor) and isinstance(entry.get(key), torch.Tensor):
                    entry[key] = entry[key].to(value.dtype)


def keeps_state_dtypes(case: Case) -> Strategy:
    built = builtin_strategy(case)
    assert isinstance(built, ComposedStrategy)
    return KeepsStateDtypes(built.wrapper, built.api, built.storage)


@dataclass(frozen=True)
class InitsInParamDtype(GradDtypeInitFirst):
    def zero_grad_dtype(self, param: torch.Tensor) -> torch.dtype:
        return param.dtype


def inits_in_param_dtype(case: Case) -> Strategy:
    built = builtin_strategy(case)
    assert isinstance(built, ComposedStrategy) and isinstance(built.api, GradDtypeInitFirst)
    api = InitsInParamDtype(**{f.name: getattr(built.api, f.name) for f in dataclasses.fields(built.api)})
    return ComposedStrategy(built.wrapper, api, built.storage)

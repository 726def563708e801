"""Generated models and optimizer schedules, named by readable strings so that a Case carries
them like any fixed model or optimizer (its `model` and `optimizer` axes), every rank builds
them from the name alone, and a failing configuration reads as what it is:

    gen_5x1x7_b10_w01          Linear(5, 1, bias) -> Linear(1, 7, no bias), the second a wrap unit
    gen_3x3x3_b11_w00_tied     the last layer's weight is the first one's
    adamw_lr0.03_wd0.1_b0.8_s2 AdamW(lr=0.03, weight_decay=0.1, betas=(0.8, 0.999)), 2 steps before the save

Names never hold a hyphen (hyperparameters print as plain decimals), so a cell id splits on
its hyphens back into its axes.

A model is an MLP of 1 to 4 Linear layers (dims[0] inputs, dims[i] outputs of layer i), ReLU
between; the layers marked in `w` are FSDP units of their own (the root holds the rest); a
tied model shares the first layer's weight with the last (both stay in the root's unit).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

MODEL_PREFIX = "gen_"
_MODEL = re.compile(
    r"^gen_(?P<dims>\d+(?:x\d+)+)_b(?P<bias>[01]+)_w(?P<wrap>[01]+)(?P<tied>_tied)?(?:_tp(?P<tp>[ncr]+))?$"
)
TP_STYLES = {"c": "ColwiseParallel", "r": "RowwiseParallel"}  # per layer; n: not parallelized
_OPTIM = re.compile(r"^(?P<kind>sgd|adam|adamw)(?P<params>(?:_[a-z]+[0-9.]+)*)(?P<sched>_sched)?$")
BATCH = 4


@dataclass(frozen=True)
class ModelSpec:
    dims: tuple[int, ...]  # inputs, then each layer's outputs
    bias: tuple[bool, ...]  # per layer
    wrapped: tuple[bool, ...]  # per layer: an FSDP unit of its own
    tied: bool = False
    # a tensor-parallel plan, a letter per layer: c column-wise, r row-wise (right after a c,
    # which feeds it its shard), n not parallelized; () for none
    tp: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        layers = len(self.dims) - 1
        if not layers >= 1 or len(self.bias) != layers or len(self.wrapped) != layers:
            raise ValueError(f"a model of {layers} layers needs {layers} bias and wrap flags: {self}")
        if any(d < 1 for d in self.dims):
            raise ValueError(f"dimensions must be >= 1: {self.dims}")
        if self.tied:
            if layers < 2 or (self.dims[-1], self.dims[-2]) != (self.dims[1], self.dims[0]):
                raise ValueError(f"tied weights need the last layer's shape to be the first's: {self.dims}")
            if self.wrapped[0] or self.wrapped[-1]:
                raise ValueError("tied layers stay in the root's unit: they cannot be wrapped")
        if self.tp:
            plan = "".join(self.tp)
            if len(self.tp) != layers or self.tied or set(plan) - set("ncr"):
                raise ValueError(f"a plan of n/c/r per layer, untied: {self.tp}")
            if plan.replace("cr", "").count("c") or plan.replace("cr", "").count("r"):
                raise ValueError(f"each column-wise layer feeds a row-wise one, and only it: {plan}")

    @property
    def name(self) -> str:
        bits = "".join("1" if b else "0" for b in self.bias)
        wrap = "".join("1" if w else "0" for w in self.wrapped)
        tied = "_tied" if self.tied else ""
        tp = f"_tp{''.join(self.tp)}" if self.tp else ""
        return f"{MODEL_PREFIX}{'x'.join(map(str, self.dims))}_b{bits}_w{wrap}{tied}{tp}"

    @classmethod
    def parse(cls, name: str) -> ModelSpec:
        match = _MODEL.match(name)
        if not match:
            raise ValueError(f"not a generated model name: {name!r} (e.g. gen_5x1x7_b10_w01)")
        return cls(
            dims=tuple(int(d) for d in match["dims"].split("x")),
            bias=tuple(c == "1" for c in match["bias"]),
            wrapped=tuple(c == "1" for c in match["wrap"]),
            tied=bool(match["tied"]),
            tp=tuple(match["tp"] or ""),
        )


class UnitLinear(nn.Linear):
    """A Linear layer that is an FSDP unit of its own (the generated models' wrap unit)."""


class GeneratedMLP(nn.Module):
    spec: ModelSpec  # set on each generated class
    wrap_units: tuple[type[nn.Module], ...] = (UnitLinear,)

    def __init__(self) -> None:
        super().__init__()
        spec = self.spec
        self.layers = nn.ModuleList(
            (UnitLinear if wrapped else nn.Linear)(d_in, d_out, bias=bias)
            for d_in, d_out, bias, wrapped in zip(spec.dims, spec.dims[1:], spec.bias, spec.wrapped)
        )
        if spec.tied:
            self.layers[-1].weight = self.layers[0].weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(torch.relu(x) if i else x)
        return x

    @classmethod
    def batch(cls, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(BATCH, cls.spec.dims[0], generator=gen), torch.randn(
            BATCH, cls.spec.dims[-1], generator=gen
        )

    @staticmethod
    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(out.float(), target.float())

    @classmethod
    def tp_plan(cls) -> dict[str, Any]:
        """The spec's tensor-parallel plan (layers.i -> ColwiseParallel / RowwiseParallel)."""
        from torch.distributed.tensor import parallel

        return {
            f"layers.{i}": getattr(parallel, TP_STYLES[style])()
            for i, style in enumerate(cls.spec.tp)
            if style in TP_STYLES
        }


@functools.cache
def generated_model(name: str) -> type[nn.Module]:
    """The class of a generated model name (one per name and process)."""
    spec = ModelSpec.parse(name)
    return type(f"GeneratedMLP_{name}", (GeneratedMLP,), {"spec": spec})


@dataclass(frozen=True)
class ScheduleSpec:
    """An optimizer with its hyperparameters, the steps trained before the save, and whether
    a StepLR scheduler (saved too) drives it."""

    kind: str  # sgd | adam | adamw
    lr: float
    steps: int = 3
    weight_decay: float = 0.0
    momentum: float = 0.0  # sgd
    beta1: float = 0.9  # adam, adamw
    scheduler: bool = False

    @property
    def name(self) -> str:
        parts = [self.kind, f"lr{self.lr:g}"]
        if self.weight_decay:
            parts.append(f"wd{self.weight_decay:g}")
        if self.kind == "sgd" and self.momentum:
            parts.append(f"m{self.momentum:g}")
        if self.kind != "sgd" and self.beta1 != 0.9:
            parts.append(f"b{self.beta1:g}")
        parts.append(f"s{self.steps}")
        return "_".join(parts) + ("_sched" if self.scheduler else "")

    @classmethod
    def parse(cls, name: str) -> ScheduleSpec:
        match = _OPTIM.match(name)
        if not match:
            raise ValueError(f"not a generated optimizer name: {name!r} (e.g. adamw_lr0.03_wd0.1_s2)")
        fields = {"lr": "lr", "wd": "weight_decay", "m": "momentum", "b": "beta1", "s": "steps"}
        values: dict[str, float | int] = {}
        for token in filter(None, match["params"].split("_")):
            key = re.match(r"^[a-z]+", token)
            if key is None or key[0] not in fields:
                raise ValueError(f"{name!r}: unknown hyperparameter {token!r}")
            values[fields[key[0]]] = float(token[len(key[0]) :])
        if "lr" not in values:
            raise ValueError(f"{name!r}: no learning rate (lr...)")
        steps = int(values.pop("steps", 3))
        return cls(kind=match["kind"], steps=steps, scheduler=bool(match["sched"]), **values)  # type: ignore[arg-type]

    def make(self, groups: list[dict]) -> torch.optim.Optimizer:
        if self.kind == "sgd":
            return torch.optim.SGD(groups, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        cls = torch.optim.Adam if self.kind == "adam" else torch.optim.AdamW
        return cls(groups, lr=self.lr, betas=(self.beta1, 0.999), weight_decay=self.weight_decay)


def is_generated_optimizer(name: str) -> bool:
    return bool(_OPTIM.match(name)) and "_lr" in name


# -- hypothesis strategies of the above (hypothesis is imported only when drawn) --------------
SMALL_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31)


def model_specs(max_layers: int = 4, max_dim: int = 33) -> Any:
    """Hypothesis strategy of ModelSpec; dimensions shrink towards 1 (below any world size)."""
    from hypothesis import strategies as st

    dim = st.one_of(st.integers(1, max_dim), st.sampled_from(SMALL_PRIMES))

    @st.composite
    def build(draw: Callable[..., Any]) -> ModelSpec:
        layers = draw(st.integers(1, max_layers))
        dims = [draw(dim) for _ in range(layers + 1)]
        tied = layers >= 2 and draw(st.booleans())
        if tied:
            dims[-2], dims[-1] = dims[0], dims[1]
            if layers == 2:
                dims = [dims[0]] * 3
        bias = tuple(draw(st.booleans()) for _ in range(layers))
        wrapped = [draw(st.booleans()) for _ in range(layers)]
        if tied:
            wrapped[0] = wrapped[-1] = False
        return ModelSpec(tuple(dims), bias, tuple(wrapped), tied)

    return build()


def tp_model_specs(degree: int, max_layers: int = 4, max_dim: int = 33) -> Any:
    """Hypothesis strategy of ModelSpec with a tensor-parallel plan for `degree` ranks: one
    column-wise layer feeding a row-wise one, at a drawn position; the dimension between them
    a multiple of the degree (an uneven split is another question); the rest as model_specs."""
    from hypothesis import strategies as st

    dim = st.one_of(st.integers(1, max_dim), st.sampled_from(SMALL_PRIMES))

    @st.composite
    def build(draw: Callable[..., Any]) -> ModelSpec:
        layers = draw(st.integers(2, max_layers))
        first = draw(st.integers(0, layers - 2))  # the column-wise layer; the next is row-wise
        dims = [draw(dim) for _ in range(layers + 1)]
        dims[first + 1] = degree * draw(st.integers(1, max(1, max_dim // degree)))
        plan = ["n"] * layers
        plan[first], plan[first + 1] = "c", "r"
        bias = tuple(draw(st.booleans()) for _ in range(layers))
        wrapped = tuple(draw(st.booleans()) for _ in range(layers))
        return ModelSpec(tuple(dims), bias, wrapped, tp=tuple(plan))

    return build()


def schedules() -> Any:
    """Hypothesis strategy of ScheduleSpec (hyperparameters from plain decimals)."""
    from hypothesis import strategies as st

    return st.builds(
        ScheduleSpec,
        kind=st.sampled_from(("sgd", "adam", "adamw")),
        lr=st.sampled_from((0.01, 0.001, 0.03, 0.1)),
        steps=st.integers(1, 4),
        weight_decay=st.sampled_from((0.0, 0.01, 0.1)),
        momentum=st.sampled_from((0.9, 0.5)),  # SGD without momentum holds no state to check
        beta1=st.sampled_from((0.9, 0.8)),
        scheduler=st.booleans(),
    )

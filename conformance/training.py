"""Deterministic training owned by the harness (the models: conformance.models; the optimizers:
conformance.optim).

Batches are seeded from (cell seed, rank, step) so every run of a cell sees the same data,
whatever the strategy under test does with its RNG.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from conformance.case import Case
from conformance.check.names import clean_name
from conformance.generated import ScheduleSpec, is_generated_optimizer
from conformance.layout.registry import layout_of
from conformance.models import build_model, has_idle_parameters, model_class
from conformance.optim.registry import optimizer_of
from conformance.optim.several import optimizers_of, scheduler_over
from conformance.precision.registry import precision_of
from conformance.world import RankContext
from conformance.world.attribution import CheckVerdict, code_under_test

TRAIN_STEPS = 3


def train_steps(optimizer: str) -> int:
    """Steps before the save: TRAIN_STEPS, or a generated schedule's own."""
    return ScheduleSpec.parse(optimizer).steps if is_generated_optimizer(optimizer) else TRAIN_STEPS


def build_optimizer(
    name: str, model: nn.Module, model_name: str = ""
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    """The cell's optimizer (and scheduler) over the wrapped model's parameters. model_name: the
    cell's model, whose plain shapes tell a Muon optimizer's weight matrices (Optimizer.matrices)."""
    spec = optimizer_of(name)
    frozen_too = has_idle_parameters(model)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad or frozen_too]
    params = [p for _, p in named]
    if spec.optimizer.matrices:
        groups = matrix_groups(named, model, model_name)
    elif spec.groups:
        # By the parameter's original name, the same on every wrapper: weights decay, biases do
        # not and learn faster. Never by shape: FSDP1's use_orig_params parameters are 1-D views
        # of the flat parameter once wrapped (documented), which left group 0 empty.
        decays = [name.rsplit(".", 1)[-1] != "bias" for name, _ in named]
        groups = [
            {"params": [p for p, d in zip(params, decays) if d]},
            {"params": [p for p, d in zip(params, decays) if not d], "weight_decay": 0.0, "lr": 2e-2},
        ]
    else:
        groups = [{"params": params}]
    optim = spec.make(groups)
    scheduler = scheduler_over(spec.scheduler.make, optim) if spec.scheduler else None
    return optim, scheduler


class NoWeightMatrix(CheckVerdict):
    """A Muon optimizer would get no 2-D weight matrix: its Muon half would test nothing. A verdict
    on the configuration, never a pass."""


def weight_matrices(model_name: str) -> dict[str, bool]:
    """The plain model's parameters by name: whether each is a weight matrix for Muon, 2-D and no
    embedding's (torch.optim.Muon's example gives Muon every 2-D parameter, the output layer's too;
    its documentation gives embeddings to AdamW). Asked of the plain model: a wrapper may flatten its
    parameters (FSDP1) or shard them."""
    plain = build_model(model_name, seed=0)
    embeddings = _embedding_weights(plain)
    return {n: p.ndim == 2 and id(p) not in embeddings for n, p in plain.named_parameters()}


def _embedding_weights(model: nn.Module) -> set[int]:
    """The ids of the model's embedding weights (Muon's documentation gives them to AdamW)."""
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}


def matrix_groups(named: list[tuple[str, nn.Parameter]], model: nn.Module, model_name: str) -> list[dict]:
    """[the weight matrices, every other parameter]: by the parameter's name in the plain model, and
    one the plain model lacks (a LoRA adapter's matrices) by its own shape, as torch.optim.Muon's
    example splits them (`p.ndim == 2`; an embedding's weight excepted)."""
    if not model_name:
        raise ValueError(
            "an optimizer of weight matrices needs the cell's model (build_optimizer's model_name)"
        )
    plain = weight_matrices(model_name)
    embeddings = _embedding_weights(model)
    chosen = [plain.get(clean_name(n), p.ndim == 2 and id(p) not in embeddings) for n, p in named]
    if not any(chosen):
        raise NoWeightMatrix(f"no parameter of the wrapped model is a weight matrix of {model_name}")
    return [
        {"params": [p for (_, p), c in zip(named, chosen) if c]},
        {"params": [p for (_, p), c in zip(named, chosen) if not c]},
    ]


class PrecisionNotInEffect(CheckVerdict):
    """The cell's precision did not take effect (a wrapper dropped the gradients' dtype, or
    ignored its mixed-precision setting and computed in fp32): the cell would test nothing of
    it. A verdict on the configuration, never a pass."""


def train(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    ctx: RankContext,
    case: Case,
    steps: int = TRAIN_STEPS,
    start_step: int = 0,
    engine: Any = None,
    scaler: Any = None,
) -> list[float]:
    """A few steps on per-replica batches; returns the per-step losses. The batch of a step
    depends on (cell seed, data-parallel rank, step) only: a resumed run from `start_step`
    sees the same data as the run it resumes, and the ranks of one tensor-parallel group or
    one pipeline see the same batches, as they must (Layout.data_rank). engine: a framework's
    engine that owns the step (TrainState.engine): `engine(x)`, `engine.backward(loss)`,
    `engine.step()` as its documentation trains, instead of the model and the optimizer.
    scaler: the cell's GradScaler (its precision scales the loss): the loss is scaled for the
    backward and `scaler.step(optim)`, `scaler.update()` step, as the AMP recipe does."""
    cls = model_class(case.model)
    choice = optimizer_of(case.optimizer)  # resolved once, not per step
    precision = precision_of(case.precision)
    losses = []
    for step in range(start_step, start_step + steps):
        x, y = batch_of(case, ctx, step)
        first = step == start_step
        if engine is not None:
            with (
                precision.watching_compute(model, first) as seen,
                code_under_test("the framework engine's forward, backward and step"),
            ):
                loss = cls.loss(engine(x), y)  # type: ignore[attr-defined]
                engine.backward(loss)
                engine.step()
            missing = precision.compute_not_in_effect(seen)
            if missing:
                raise PrecisionNotInEffect(missing)
            losses.append(loss.item())
            continue
        # the wrapped model is the strategy's: its forward and backward run the wrapper's hooks
        # (FSDP's lazy init and checks, DDP's reducer), code under test
        with (
            precision.watching_compute(model, first) as seen,
            code_under_test("the wrapped model's forward and backward"),
        ):
            step_of = getattr(model, "pipeline_step", None)  # a pipeline stage runs its schedule
            if step_of is not None:
                loss = step_of(x, y)
            else:
                with precision.forward(ctx.device):
                    loss = cls.loss(model(x), y)  # type: ignore[attr-defined]
                (loss if scaler is None else scaler.scale(loss)).backward()
        missing = (precision.not_in_effect(model) or precision.compute_not_in_effect(seen)) if first else None
        if missing:
            raise PrecisionNotInEffect(missing)
        # the optimizer steps on the wrapper's parameters and on what a load put into it: a
        # step that raises on a loaded state (a param group that lost its "lr") is the cell's
        with code_under_test("the optimizer step on the wrapped model's (or loaded) state"):
            if choice.closure:  # LBFGS re-evaluates the loss (its documented use)
                optim.step(_closure(model, optim, cls, x, y))
            elif scaler is not None:  # skips the step on inf/NaN gradients, then adapts the scale
                for each in optimizers_of(optim):  # several: each stepped, one update (the AMP recipe)
                    scaler.step(each)
                scaler.update()
            else:
                optim.step()
            optim.zero_grad(set_to_none=True)
            if scheduler is not None:
                _step_scheduler(scheduler, loss, choice.scheduler_metric)
        losses.append(loss.item())
    return losses


def batch_of(case: Case, ctx: RankContext, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (input, target) batch of a step (0-based) on this rank: seeded from (cell seed,
    data-parallel rank, step) only, in the cell's precision, on the world's device. What `train`
    steps on, and what a library that runs the training loop itself is given
    (conformance.strategy.lifecycle.Training)."""
    cls = model_class(case.model)
    data_rank = layout_of(case).data_rank(case, ctx.rank)
    gen = torch.Generator().manual_seed(ctx.seed * 1_000_003 + data_rank * 1009 + step)
    x, y = precision_of(case.precision).batch(*(t.to(ctx.device) for t in cls.batch(gen)))  # type: ignore[attr-defined]
    return x, y


def _closure(model: nn.Module, optim: torch.optim.Optimizer, cls: Any, x: Any, y: Any) -> Any:
    """The closure `optimizer.step(closure)` takes: the loss of the batch, recomputed with its
    gradients (torch.optim.LBFGS's documentation), returned averaged over the world as the
    gradients are: the objective is the world's, so every replica's optimizer sees the same loss
    (LBFGS keeps it, prev_loss, and stops its inner iterations on it)."""

    def closure() -> torch.Tensor:
        optim.zero_grad()
        loss = cls.loss(model(x), y)
        loss.backward()
        return _world_mean(loss)

    return closure


def _step_scheduler(scheduler: Any, loss: torch.Tensor, metric: bool) -> None:
    """scheduler.step(), or for a scheduler stepped on a metric (ReduceLROnPlateau) step(the loss
    averaged over the world): every replica then lowers its LR at the same step."""
    if not metric:
        scheduler.step()
        return
    scheduler.step(_world_mean(loss).item())


def _world_mean(loss: torch.Tensor) -> torch.Tensor:
    """The loss averaged over the world (a collective), detached."""
    metric = loss.detach().clone()
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(metric)
        metric /= torch.distributed.get_world_size()
    return metric


def train_state(
    state: Any, ctx: RankContext, case: Case, steps: int | None = None, start_step: int = 0
) -> list[float]:
    """`train` on a TrainState (conformance.strategy.protocol): its model, optimizer, scheduler
    and engine; `steps` defaults to the cell's optimizer's (train_steps)."""
    return train(
        state.model,
        state.optim,
        state.scheduler,
        ctx,
        case,
        steps=train_steps(case.optimizer) if steps is None else steps,
        start_step=start_step,
        engine=state.engine,
        scaler=state.scaler,
    )

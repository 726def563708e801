"""The resume check: a resumed run must continue exactly as the run it was saved from.

Run A trains K steps, saves, and trains K more. Run B, in another world of the same size
(other rank processes, which only ever run B phases, so nothing of A is in their memory),
builds a fresh model with other weights, loads, and trains the same K
steps on the same batches (the harness owns the data: a batch depends on the cell seed, the
rank and the step only). Every per-step loss, and the final parameters and optimizer state
(each rank's local state and rank 0's gathered state), must be bitwise equal between A and B.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist

from conformance.case import Case
from conformance.check.base import CaseCells, Check, Feature, Under
from conformance.check.compare import compare_states, first_of_each_kind
from conformance.check.construction_cells import (
    built_on_meta,
    built_on_rank0,
    built_on_rank0_uninitialised,
    by_constructor,
)
from conformance.check.fused_cells import RESUME_FUSED_SLICE
from conformance.check.phases import PhaseError, Phases, observed_of
from conformance.check.roundtrip import (
    StrategyFactory,
    VacuousCheckError,
    flat_sharded,
    fresh_state,
    limit_lines,
    preload_hook,
)
from conformance.check.slices import LAYOUT_WRAPPERS, MAIN_APIS, MAIN_WRAPPERS, PP_FSDP_WRAPPERS, Slice
from conformance.check.snapshot import count_elements, full_state, local_state
from conformance.construction.registry import meta_constructions, rank0_constructions
from conformance.layout.builtin import builtin_strategy
from conformance.observed import Observed
from conformance.optim.registry import optimizer_names, optimizer_product
from conformance.outcome import Outcome
from conformance.precision.registry import grad_precisions, other_precisions
from conformance.strategy.under_test import strategy_under_test
from conformance.training import TRAIN_STEPS, train_state, train_steps
from conformance.world import RankContext


@dataclass(frozen=True)
class ResumeSpec:
    case: Case
    directory: str
    strategy_factory: StrategyFactory = field(default=builtin_strategy)
    reference: list[dict[str, Any]] | None = None  # run A's per-rank results, for run B


def _finish(state: Any, case: Case, ctx: RankContext) -> dict[str, Any]:
    start = train_steps(case.optimizer)
    losses = train_state(state, ctx, case, steps=TRAIN_STEPS, start_step=start)
    sharded = flat_sharded(case, ctx.world_size)
    return {
        "losses": losses,
        "local": local_state(state.model, state.optimizers, state.stateful),
        "full": full_state(state.model, state.optimizers, state.stateful, ctx, sharded=sharded),
    }


def run_a(ctx: RankContext, spec: ResumeSpec) -> dict[str, Any]:
    strategy = strategy_under_test(spec.strategy_factory, spec.case)
    state = fresh_state(strategy, spec.case, ctx, seed=ctx.seed)
    train_state(state, ctx, spec.case)
    holds: list[bool] = [False] * ctx.world_size  # a rank whose shard is empty may hold none
    dist.all_gather_object(holds, any(o.state for o in state.optimizers))
    if not any(holds):
        raise VacuousCheckError(
            "the optimizer holds no state after training: nothing to resume (a framework's container "
            "of optimizers: own_training lists the torch optimizers in it as TrainState.holders)"
        )
    strategy.save(state, Path(spec.directory), ctx)
    return _finish(state, spec.case, ctx)


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def run_b(ctx: RankContext, spec: ResumeSpec) -> dict[str, Any]:
    assert spec.reference is not None
    case, path = spec.case, Path(spec.directory)
    strategy = strategy_under_test(spec.strategy_factory, case)
    state = fresh_state(
        strategy, case, ctx, seed=ctx.seed + 1, preload=preload_hook(strategy, path, ctx), loading=True
    )
    strategy.load(state, path, ctx)
    got = _finish(state, case, ctx)
    want = spec.reference[ctx.rank]
    losses, observed = [], []  # the trajectory first: it is what a user sees diverge
    for step, (a, b) in enumerate(zip(want["losses"], got["losses"]), start=train_steps(case.optimizer)):
        if _bits(a) != _bits(b):
            message = f"loss {b!r} after the resume, {a!r} without it"
            losses.append(f"rank {ctx.rank} step {step}: {message}")
            observed.append(Observed("resumed trajectory", "loss", f"step {step}", ctx.rank, message))
            break
    local_diffs = first_of_each_kind(compare_states(want["local"], got["local"]))
    local = [f"rank {ctx.rank} local state: {d}" for d in local_diffs]
    full_diffs = first_of_each_kind(compare_states(want["full"], got["full"])) if ctx.rank == 0 else []
    full = [f"full state: {d}" for d in full_diffs]
    observed += [d.observed("full state") for d in full_diffs]
    observed += [d.observed("local state", ctx.rank) for d in local_diffs]
    failures = losses + full + local
    return {"failures": limit_lines(failures), "failure_count": len(failures), "observed": observed}


def execute(phases: Phases, case: Case, under: Under) -> tuple[Outcome, str]:
    factory = under.factory
    directory = str(phases.scratch())
    try:
        a = phases.run(
            "run A: train, save, train on", case.world_size, run_a, ResumeSpec(case, directory, factory)
        )
        b = phases.run(
            "run B: load in another world, train on",
            case.world_size,
            run_b,
            ResumeSpec(case, directory, factory, reference=a),
            other_world=True,
        )
    except PhaseError as exc:
        return exc.outcome, exc.detail
    failures = [line for value in b for line in value["failures"]]
    phases.observed += observed_of(b)
    if failures:
        total = sum(value["failure_count"] for value in b)
        return (
            Outcome.FAIL,
            f"{total} differences between the resumed run and the run it was saved from:\n"
            + "\n".join(failures),
        )
    tensors, elements = count_elements(a[0]["full"])
    return Outcome.PASS, (
        f"the resumed run is bitwise the run it was saved from: {TRAIN_STEPS} losses per rank, then "
        f"{tensors} tensors ({elements} elements) of the gathered state and every rank's local state"
    )


RESUME_SLICE = Slice("resume", MAIN_WRAPPERS, MAIN_APIS, optimizers=("adamw+sched",))
# every optimizer value once, each scheduler among them (what a resume must carry on: a step size,
# a cycle, a best loss); the full profile declares the product of the optimizer axes at 2 ranks,
# whose pairs default's covering meets
RESUME_OPTIMIZER_SLICE = dataclasses.replace(
    RESUME_SLICE,
    name="resume, optimizers",
    apis=("dsd_sharded", "sd_full", "sd_sharded"),
    optimizers=optimizer_names,
)
RESUME_PRODUCT_SLICE = dataclasses.replace(
    RESUME_OPTIMIZER_SLICE, name="resume, the optimizer axes' product", optimizers=optimizer_product
)
# each precision: the loss scaler's scale and growth tracker, bf16 state, must carry on bitwise
RESUME_PRECISION_SLICE = dataclasses.replace(
    RESUME_SLICE,
    name="resume, precisions",
    apis=("dsd_sharded", "sd_full", "sd_sharded"),
    precisions=other_precisions,
)
# bf16 gradients of fp32 parameters (no wrapper keeps grad_dtype but none): the optimizer state
# built from them must carry on in their dtype
RESUME_GRAD_DTYPE_SLICE = dataclasses.replace(
    RESUME_SLICE,
    name="resume, bf16 gradients",
    wrappers=(("plain", "none"),),
    apis=None,
    optimizers=optimizer_names,
    precisions=grad_precisions,
)
# a frozen layer in the optimizer and a never-stepped one: what a resume must carry, at 2 ranks
RESUME_IDLE_SLICE = dataclasses.replace(
    RESUME_SLICE, apis=("dsd_sharded", "sd_full"), models=("frozen_idle",)
)

# The parallel layouts, through the resharding format (pipeline stages: also flattened by name)
RESUME_LAYOUT_SLICE = Slice(
    "resume in parallel layouts",
    LAYOUT_WRAPPERS,
    ("dsd_sharded", "dsd_sharded_flat"),
    storages=("dcp",),
    optimizers=("adamw+sched",),
    models=("llama",),
)
# the fresh model built on the meta device (conformance.construction): a buffer the state dict does
# not hold must be what the constructor computed, or the resumed run's forward differs
RESUME_META_SLICE = dataclasses.replace(
    RESUME_SLICE,
    name="resume into a model built on the meta device",
    apis=("dsd_full_bcast", "dsd_sharded", "sd_full"),
    storages=("dcp", "torch_save"),
    models=("mlp_int_buffer", "mlp_nonpersistent"),
    constructions=meta_constructions,
)
# rank-0 init (conformance.construction): the full state loaded on every rank or broadcast from rank 0
RESUME_RANK0_SLICE = dataclasses.replace(
    RESUME_META_SLICE,
    name="resume into a model built by rank-0 init",
    apis=("dsd_full_bcast", "sd_full"),
    constructions=rank0_constructions,
)
# ci: the buffer no state dict holds, through FSDP2's sharded load (tests/broken_constructions.py)
RESUME_META_CI_SLICE = dataclasses.replace(
    RESUME_META_SLICE,
    name="resume into a model built on the meta device (ci)",
    wrappers=(("fsdp2", "shard"),),
    apis=("dsd_sharded",),
    storages=("dcp",),
    models=("mlp_nonpersistent",),
)
RESUME_PP_FSDP_SLICE = dataclasses.replace(
    RESUME_LAYOUT_SLICE, name="resume in pipeline stages with FSDP", wrappers=PP_FSDP_WRAPPERS
)

CHECK = Check(
    name="resume",
    title="Resume: the resumed run continues bitwise as the run it was saved from",
    shape=CaseCells(
        {
            "ci": ((RESUME_SLICE, (2,)), (RESUME_IDLE_SLICE, (2,)), (RESUME_META_CI_SLICE, (2,))),
            "default": (
                (RESUME_SLICE, (2,)),
                (RESUME_OPTIMIZER_SLICE, (2,)),
                (RESUME_PRECISION_SLICE, (2,)),
                (RESUME_GRAD_DTYPE_SLICE, (1,)),
                (RESUME_IDLE_SLICE, (2,)),
                (RESUME_LAYOUT_SLICE, (2,)),
                (RESUME_PP_FSDP_SLICE, (4,)),
                (RESUME_META_SLICE, (2,)),
                (RESUME_RANK0_SLICE, (2,)),
                (RESUME_FUSED_SLICE, (2,)),
            ),
            "full": (
                (RESUME_SLICE, (1, 2, 4)),
                (RESUME_PRODUCT_SLICE, (2,)),
                (RESUME_PRECISION_SLICE, (2,)),
                (RESUME_GRAD_DTYPE_SLICE, (1,)),
                (RESUME_IDLE_SLICE, (1, 2, 4)),
                (RESUME_LAYOUT_SLICE, (2, 4)),
                (RESUME_PP_FSDP_SLICE, (4,)),
                (RESUME_META_SLICE, (1, 2, 4)),
                (RESUME_RANK0_SLICE, (2, 4)),
                (RESUME_FUSED_SLICE, (2, 4)),
            ),
        }
    ),
    execute=execute,
    features=(
        Feature("resume", "the resumed run continues bitwise", by_constructor(lambda a: True)),
        Feature(
            "resume, meta init",
            "the resumed run continues bitwise from a fresh model built on the meta device",
            built_on_meta,
        ),
        Feature(
            "resume, rank-0 init",
            "the resumed run continues bitwise from a fresh model built by its constructor on rank 0 only",
            built_on_rank0,
        ),
        Feature(
            "resume, rank-0 init, no reset",
            "a pitfall on purpose: the resumed run continues bitwise from a rank-0 init whose other ranks "
            "skip their reset_parameters()",
            built_on_rank0_uninitialised,
        ),
    ),
    registered=True,
    properties=True,
)

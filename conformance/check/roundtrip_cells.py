"""The round trip's cells (the slices of the matrix each profile runs it over) and its feature
columns."""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.check.base import Feature
from conformance.check.construction_cells import (
    built_on_meta,
    built_on_rank0,
    built_on_rank0_uninitialised,
    by_constructor,
)
from conformance.check.slices import (
    EP_WRAPPERS,
    EXPERT_MODELS,
    FSDP1_TP_WRAPPERS,
    HSDP_TP_WRAPPERS,
    HSDP_WRAPPERS,
    LAYOUT_WRAPPERS,
    MAIN_WRAPPERS,
    MODELS,
    ONE_D_WRAPPERS,
    ONE_FEATURE_MODELS,
    PP_FSDP_WRAPPERS,
    TP_WRAPPERS,
    Slice,
)
from conformance.models import carries
from conformance.optim.registry import DEFAULT_OPTIMIZER, gate_optimizers, optimizer_names, optimizer_product
from conformance.precision.registry import (
    grad_precisions,
    is_default,
    mixed,
    mixed_precisions,
    other_precisions,
    precision_of,
    scales_loss,
    sets_grad_dtype,
)

FLAT_WRAPPERS_AND_APIS = Slice("every 1-D wrapper x API x storage", ONE_D_WRAPPERS)
HSDP_WRAPPERS_AND_APIS = Slice("HSDP x API x storage", HSDP_WRAPPERS)
# each optimizer value once (ci, default); the product of the optimizer axes (full), whose
# pairs a covering meets
OPTIMIZER_SLICE = Slice(
    "optimizers", MAIN_WRAPPERS, ("dsd_sharded", "sd_full", "sd_sharded"), optimizers=optimizer_names
)
GATE_OPTIMIZER_SLICE = dataclasses.replace(
    OPTIMIZER_SLICE, name="the gate's optimizers", optimizers=gate_optimizers
)
OPTIMIZER_PRODUCT_SLICE = dataclasses.replace(
    OPTIMIZER_SLICE,
    name="optimizers x implementations x param groups x schedulers",
    optimizers=optimizer_product,
)
MODEL_SLICE = Slice(
    "models", MAIN_WRAPPERS, ("dsd_full", "dsd_sharded", "sd_full", "sd_sharded"), models=MODELS
)
# default declares the models that have answered its feature table per row since before each
# feature of mlp_scalar had a model of its own: the one-feature ones are in full, whose every pair
# default's covering meets (their columns answer where the covering put a cell, else unknown)
DEFAULT_MODEL_SLICE = dataclasses.replace(
    MODEL_SLICE, models=tuple(m for m in MODELS if m not in ONE_FEATURE_MODELS)
)
# The expert-parallelism recipe: experts sharded on sub-groups, the rest on the world. Its
# seed row is fsdp1_full_shard-sd_sharded-torch_save_per_rank-adamw-moe (SHARDED_STATE_DICT,
# one file per rank).
MOE_SLICE = Slice(
    "mixture of experts on expert-parallel sub-groups",
    (("fsdp1", "full_shard"), ("fsdp1+orig", "full_shard"), ("fsdp2", "shard")),
    models=EXPERT_MODELS,
)
PRECISION_SLICE = Slice(
    "precisions: mixed, loss scaling, pure bf16",
    MAIN_WRAPPERS,
    ("dsd_full", "dsd_sharded", "sd_full", "sd_sharded"),
    precisions=other_precisions,
)
# default declares the wrapper's mixed precisions, whose column answered per row before the
# axis had loss scaling and pure bf16; those are in full, met by the covering's pairs
DEFAULT_PRECISION_SLICE = dataclasses.replace(PRECISION_SLICE, precisions=mixed_precisions)
# each precision with each optimizer value (state of the parameter's dtype or fp32 beside bf16
# parameters, a GradScaler beside a scheduler) and each model (buffers cast, an int buffer kept):
# in full, whose pairs default's covering meets
PRECISION_OPTIMIZER_SLICE = dataclasses.replace(
    PRECISION_SLICE,
    name="precisions x optimizers",
    apis=("dsd_sharded", "sd_full", "sd_sharded"),
    optimizers=optimizer_names,
)
PRECISION_MODEL_SLICE = dataclasses.replace(PRECISION_SLICE, name="precisions x models", models=MODELS)
# fp32 parameters with bf16 gradients (Tensor.grad_dtype), where a parameter keeps it (no wrapper:
# conformance.layout's keeps_grad_dtype), with every optimizer that steps them
GRAD_DTYPE_SLICE = Slice(
    "bf16 gradients of fp32 parameters",
    (("plain", "none"),),
    optimizers=optimizer_names,
    precisions=grad_precisions,
)
# ci: loss scaling (a GradScaler's state in the checkpoint, tests/broken_axes.drops_scaler) and a
# model in bf16, through the gate's plainest formats
PRECISION_CI_SLICE = Slice(
    "precisions (ci)",
    MAIN_WRAPPERS,
    ("dsd_sharded", "sd_full"),
    storages=("dcp", "torch_save"),
    precisions=("bf16_pure", "fp16_amp"),
)
# FSDP.optim_state_dict with the optimizer's state offloaded (its default) against without
# (sd_full): on CPU, offloading hands back exp_avg equal to exp_avg_sq under use_orig_params.
OPTIM_OFFLOAD_SLICE = Slice(
    "FSDP1 optimizer-state offload",
    (("fsdp1", "full_shard"), ("fsdp1+orig", "full_shard")),
    ("sd_full", "sd_full_optim_offload"),
    storages=("torch_save",),
)


# Tensor parallelism, 2-D meshes, pipeline stages, prefixing module wrappers, CPU offload:
# get/set_state_dict (and its rank-0 broadcast load, the documented DTensor path) over every
# storage, on the llama-style model, the MLP and the MLP with a scalar parameter and an int buffer.
LAYOUT_STORAGES = ("dcp", "hf_safetensors", "torch_save", "torch_save_per_rank")
LAYOUT_SLICE = Slice(
    "parallel layouts",
    LAYOUT_WRAPPERS,
    ("dsd_full", "dsd_full_bcast", "dsd_full_bcast_all", "dsd_full_flat", "dsd_sharded", "dsd_sharded_flat"),
    storages=LAYOUT_STORAGES,
    models=("llama", "mlp_scalar"),
)
# each feature of mlp_scalar on a model of its own (the full declaration: default's covering meets
# every (layout, model) pair, so a layout that refuses the 0-dim parameter still shows the int buffer)
LAYOUT_MODELS_SLICE = dataclasses.replace(
    LAYOUT_SLICE,
    name="parallel layouts, one model feature each",
    models=ONE_FEATURE_MODELS,
)
TP_SLICE = dataclasses.replace(LAYOUT_SLICE, name="tensor parallel", wrappers=TP_WRAPPERS)
PP_FSDP_SLICE = dataclasses.replace(
    LAYOUT_SLICE, name="FSDP inside pipeline stages", wrappers=PP_FSDP_WRAPPERS, models=("llama",)
)
LAYOUT_CI_SLICE = Slice(
    "parallel layouts (ci)",
    LAYOUT_WRAPPERS,
    ("dsd_sharded", "dsd_sharded_flat"),
    storages=("dcp",),
    models=("llama",),
)
# Experts as DTensors over (dp, ep) meshes of 2 and 4 ranks (torchtitan's MoE layout).
EP_SLICE = Slice(
    "experts as DTensors",
    EP_WRAPPERS,
    ("dsd_full", "dsd_full_bcast", "dsd_sharded"),
    storages=LAYOUT_STORAGES,
    models=("moe_dtensor",),
)
# The base cells of the tensor-parallel properties (hypothesis draws the mesh and a plan per
# layer of a generated MLP): in the full profile.
TP_PROPERTY_SLICE = dataclasses.replace(TP_SLICE, name="tensor parallel, the MLP", models=("mlp",))
HSDP_TP_SLICE = Slice("HSDP + TP", HSDP_TP_WRAPPERS, ("dsd_full", "dsd_sharded"), models=("llama",))
# FSDP1 over TP: its own state-dict types and DSD's, through the storages of the parallel layouts
FSDP1_TP_SLICE = Slice(
    "FSDP1 over tensor parallel",
    FSDP1_TP_WRAPPERS,
    ("dsd_full", "dsd_sharded", "sd_full", "sd_sharded"),
    storages=LAYOUT_STORAGES,
    models=("llama", "mlp"),
)


def _basic(axes: Any) -> bool:
    return axes["model"] == "mlp" and is_default(axes["precision"]) and axes["world_size"] != 4


# The round trip's columns of the feature table.
_FEATURES: tuple[Feature, ...] = (
    Feature(
        "round trip",
        "the mlp with AdamW at 1-2 ranks",
        lambda a: _basic(a) and a["optimizer"] == DEFAULT_OPTIMIZER,
    ),
    Feature(
        "optimizers",
        "every stateful torch.optim optimizer (Adafactor's factored state, LBFGS's, NAdam's and ASGD's "
        "scalars), foreach and fused, two param groups, each stateful LR scheduler",
        lambda a: _basic(a) and a["optimizer"] != DEFAULT_OPTIMIZER,
    ),
    Feature("4 ranks", "the round trip at 4 ranks", lambda a: a["world_size"] == 4),
    Feature("tied weights", "tied input and output embeddings", lambda a: a["model"] == "tied_transformer"),
    Feature("buffers", "BatchNorm running stats and a frozen layer", lambda a: a["model"] == "bn_frozen"),
    Feature("idle params", "a parameter that never got a gradient", lambda a: a["model"] == "frozen_idle"),
    Feature(
        "experts",
        "MoE experts on sub-groups, under one name on every rank",
        lambda a: a["model"] == "moe",
    ),
    Feature(
        "named experts",
        "MoE experts on sub-groups, each under a name of its own (DCP's advised layout)",
        lambda a: a["model"] == "moe_named",
    ),
    Feature(
        "mixed prec.",
        "the wrapper's mixed precision over fp32 parameters (bf16, bf16 reductions, fp16)",
        lambda a: mixed(a["precision"]),
    ),
    Feature(
        "loss scaling",
        "fp16 with a GradScaler (autocast, or the wrapper's fp16): the scaler's state in the checkpoint",
        lambda a: scales_loss(a["precision"]),
    ),
    Feature(
        "pure bf16",
        "the model itself in bf16: parameters, buffers and optimizer state",
        lambda a: not precision_of(a["precision"]).keeps_fp32,
    ),
    Feature(
        "bf16 grads",
        "fp32 parameters with bf16 gradients (Tensor.grad_dtype): the optimizer state built from them",
        lambda a: sets_grad_dtype(a["precision"]),
    ),
    # the parallel layouts, a column each (docs/layouts.md): a family's row says how it fares
    # under each
    Feature(
        "TP",
        "tensor parallel alone, on a 2-D mesh with FSDP2 or FSDP1, on a 3-D mesh with HSDP (the llama and MLP plans)",
        lambda a: a.get("sharding") in ("tp", "hsdp_tp"),
    ),
    Feature(
        "DTensor experts",
        "experts sharded as DTensors over an expert-parallel mesh dimension",
        lambda a: a.get("sharding") == "ep",
    ),
    Feature(
        "pipeline",
        "one pipeline stage per rank, or FSDP2 inside each stage",
        lambda a: a.get("wrapper") == "pp",
    ),
    Feature(
        "act. ckpt",
        "checkpoint_wrapper on the wrap units under FSDP2",
        lambda a: a.get("wrapper") == "fsdp2+ac",
    ),
    Feature(
        "compile",
        "torch.compile on the wrap units under FSDP2",
        lambda a: a.get("wrapper") == "fsdp2+compile",
    ),
    Feature(
        "CPU offload",
        "FSDP2 with CPUOffloadPolicy",
        lambda a: a.get("wrapper") == "fsdp2+offload",
    ),
    Feature(
        "scalar param",
        "a learnable 0-dim parameter, the model's only feature beside weight matrices",
        lambda a: carries(a["model"]) == {"scalar parameter"},
    ),
    Feature(
        "int buffer",
        "an int64 buffer counted up by every forward, the model's only feature beside weight matrices",
        lambda a: carries(a["model"]) == {"int buffer"},
    ),
    Feature(
        "scalar, int",
        "a learnable 0-dim parameter and an int64 buffer in one model",
        lambda a: carries(a["model"]) == {"scalar parameter", "int buffer"},
    ),
    Feature(
        "fused proj.",
        "fused q/k/v and gate/up weights that the model's state-dict hooks checkpoint as split keys",
        lambda a: "fused projection" in carries(a["model"]),
    ),
)

FEATURES: tuple[Feature, ...] = (
    *(dataclasses.replace(f, selects=by_constructor(f.selects)) for f in _FEATURES),
    Feature(
        "meta init",
        "the fresh model built on the meta device, then to_empty() and reset_parameters() (FSDP1's own "
        "materialisation), then the load: a buffer no state dict holds, an int buffer, a tie, BatchNorm's running stats",
        built_on_meta,
    ),
    Feature(
        "rank-0 init",
        "the fresh model built by its constructor on rank 0 only and on the meta device elsewhere, then "
        "to_empty() and reset_parameters() there (FSDP1 materialises it itself), then the full state loaded or broadcast "
        "from rank 0",
        built_on_rank0,
    ),
    Feature(
        "rank-0 init, no reset",
        "a pitfall on purpose: rank-0 init as broadcast_from_rank0's StateDictOptions describes it, "
        "the other ranks' to_empty() and the load without their reset_parameters(): what no state dict "
        "holds (a non-persistent buffer) is left as to_empty() gave it",
        built_on_rank0_uninitialised,
    ),
)

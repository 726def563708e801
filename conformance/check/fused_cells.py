"""The cells of the model with fused projections (conformance.fused_lm): a checkpoint whose keys
and shapes are not the live parameters', made by the model's own state-dict hooks.

Its round trip runs under the main data-parallel wrappers and tensor parallelism (alone and
on a 2-D mesh with FSDP2) through each of their main state-dict APIs; its reshard cells save at
2 ranks and load at 4 and back; its relayout pairs are the llama's TP pairs (conformance.check.relayout);
its resume continues from a checkpoint of split keys, and its hygiene asks that a full checkpoint
hold the plain model's own keys (the split ones) and load strict into it.
"""

from __future__ import annotations

from conformance.check.slices import MAIN_APIS, MAIN_WRAPPERS, TP_WRAPPERS, Slice

FUSED_MODEL = "llama_fused"
FUSED_STORAGES = ("dcp", "torch_save", "torch_save_per_rank")
FUSED_SLICE = Slice(
    "fused projections",
    MAIN_WRAPPERS + TP_WRAPPERS,
    (*MAIN_APIS, "dsd_full_bcast"),
    storages=FUSED_STORAGES,
    models=(FUSED_MODEL,),
)
RESHARD_FUSED_SLICE = Slice(
    "resharding, fused projections",
    MAIN_WRAPPERS,
    MAIN_APIS,
    storages=("dcp", "torch_save"),
    models=(FUSED_MODEL,),
)
# the resumed run continues from a checkpoint whose keys are the split ones (sharded and full)
RESUME_FUSED_SLICE = Slice(
    "resume, fused projections",
    MAIN_WRAPPERS + TP_WRAPPERS,
    ("dsd_full", "dsd_sharded", "sd_full", "sd_sharded"),
    storages=("dcp", "torch_save"),
    optimizers=("adamw+sched",),
    models=(FUSED_MODEL,),
)
# a full checkpoint of the fused model: the split keys, loaded strict into the plain model
HYGIENE_FUSED_SLICE = Slice(
    "key hygiene, fused projections",
    MAIN_WRAPPERS + TP_WRAPPERS,
    ("dsd_full", "sd_full", "sd_full_rank0"),
    storages=("torch_save", "hf_safetensors"),
    kinds=("full",),
    models=(FUSED_MODEL,),
)

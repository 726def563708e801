"""The cells of the model with fused projections (conformance.fused_lm): a checkpoint whose keys
and shapes are not the live parameters', made by the model's own state-dict hooks.

Its round trip runs under the main data-parallel wrappers and tensor parallelism (alone and
on a 2-D mesh with FSDP2) through each of their main state-dict APIs; its reshard cells save at
2 ranks and load at 4 and back; its relayout pairs are the llama's TP pairs (conformance.check.relayout).
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

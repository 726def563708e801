"""The construction axis's cells (conformance.construction): the slices of the fresh model built on
the meta device and by rank-0 init, and the predicates that tell their columns from the
constructor's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from conformance.case import DEFAULT_CONSTRUCTION
from conformance.check.slices import MAIN_WRAPPERS, Slice
from conformance.construction.registry import is_default as is_default_construction
from conformance.construction.registry import (
    meta_constructions,
    on_meta,
    rank0_constructions,
    rank0_init,
    skips_initialisation,
)

# The fresh model built on the meta device (conformance.construction): the models whose state is
# more than weight matrices (a non-persistent buffer computed in __init__, as a rotary cache's
# inv_freq; an int buffer; a tie; BatchNorm's running stats), through the full
# state on every rank, its broadcast from rank 0, and the sharded state
META_SLICE = Slice(
    "built on the meta device",
    MAIN_WRAPPERS,
    ("dsd_full", "dsd_full_bcast", "dsd_sharded", "sd_full", "sd_sharded"),
    storages=("dcp", "torch_save"),
    models=("bn_frozen", "mlp_int_buffer", "mlp_nonpersistent", "tied_transformer"),
    constructions=meta_constructions,
)
META_CI_SLICE = dataclasses.replace(
    META_SLICE,
    name="built on the meta device (ci)",
    apis=("dsd_sharded",),
    storages=("dcp",),
    models=("mlp_nonpersistent",),
)

# Rank-0 init (conformance.construction): the constructor on rank 0, the meta device elsewhere, then
# a full state: loaded on every rank, or broadcast from rank 0 (Accelerate's FSDP2 recipe). A
# sharded load is not this recipe (every rank reads its own part), so its APIs have no such cells.
RANK0_SLICE = dataclasses.replace(
    META_SLICE,
    name="rank-0 init",
    apis=("dsd_full", "dsd_full_bcast", "sd_full"),
    constructions=rank0_constructions,
)


def by_constructor(selects: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A column's cells among those whose fresh model its constructor built: a cell built another
    way answers the columns of its construction only (a refusal of the meta device must not read as
    a tied model's or a buffer's)."""
    return lambda a: is_default_construction(str(a.get("construction", DEFAULT_CONSTRUCTION))) and selects(a)


def built_on_meta(a: Any) -> bool:
    return on_meta(str(a.get("construction", DEFAULT_CONSTRUCTION)))


def built_on_rank0(a: Any) -> bool:
    """A rank-0 init by the documented recipe (the other ranks' own initialisation included)."""
    construction = str(a.get("construction", DEFAULT_CONSTRUCTION))
    return rank0_init(construction) and not skips_initialisation(construction)


def built_on_rank0_uninitialised(a: Any) -> bool:
    """A rank-0 init whose other ranks skip their own initialisation (a pitfall on purpose)."""
    construction = str(a.get("construction", DEFAULT_CONSTRUCTION))
    return rank0_init(construction) and skips_initialisation(construction)

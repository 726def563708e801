"""FSDP1 on one dimension: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, with and without use_orig_params."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conformance.case import Case
from conformance.construction.base import Materialize
from conformance.layout.base import Layout, Refusal
from conformance.optim.registry import in_param_groups, steps_matrices
from conformance.precision.registry import precision_of
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.wrappers import Fsdp1Wrapper

GROUPS_NEED_ORIG_PARAMS: Refusal = (
    {"optimizer": in_param_groups},
    "FSDP1 without use_orig_params gives the optimizer one flat parameter per unit: weights and "
    "biases cannot go in separate param groups",
)

FLAT_FOR_MUON: Refusal = (
    {"optimizer": steps_matrices},
    "FSDP1 without use_orig_params gives the optimizer one flat 1-D parameter per unit: no parameter "
    "is a 2-D weight matrix for Muon to step",
)
SHARDED_VIEWS_FOR_MUON = (
    "FSDP1 with use_orig_params, sharding each unit over 2+ ranks, gives the optimizer 1-D views of "
    "each rank's flat shard: torch.optim.Muon refuses them when built ('Muon only supports 2D "
    "parameters'), DeepSpeed's Muon asserts G.ndim >= 2 at its first step (tried on torch 2.13, "
    "DeepSpeed 0.19.8, FULL_SHARD and SHARD_GRAD_OP)"
)


def muon_refusals(orig: bool, sharded_when: Mapping[str, Any] | None) -> tuple[Refusal, ...]:
    """What an FSDP1 layout refuses of Muon: everything without use_orig_params; with it, the cells
    whose units it shards over 2+ ranks (sharded_when: the axes that say so; None: it never does)."""
    if not orig:
        return (FLAT_FOR_MUON,)
    if sharded_when is None:
        return ()
    return (({"optimizer": steps_matrices, **sharded_when}, SHARDED_VIEWS_FOR_MUON),)


def fsdp1_wrapper(
    case: Case, use_orig_params: bool, hsdp_shape: tuple[int, int] | None = None, sharding: str = ""
) -> Fsdp1Wrapper:
    """The cell's FSDP1 wrapper; sharding: its ShardingStrategy (lower case) when the cell's
    sharding axis names a layout rather than one (FSDP1 over TP shards fully over "dp")."""
    api = STATE_APIS["fsdp1"].get(case.api)
    return Fsdp1Wrapper(
        sharding or case.sharding,
        use_orig_params=use_orig_params,
        mixed=precision_of(case.precision).fsdp1,
        sync_module_states=getattr(api, "sync_module_states", False),
        hsdp_shape=hsdp_shape,
    )


@dataclass(frozen=True)
class Fsdp1(Layout):
    """Shards one copy over the world (NO_SHARD: a whole copy on every rank)."""


def _layout(wrapper: str, sharding: str, orig: bool, replicated: bool) -> Fsdp1:
    return Fsdp1(
        wrapper,
        sharding,
        build=lambda case: fsdp1_wrapper(case, use_orig_params=orig),
        apis=STATE_APIS["fsdp1"],
        replicated=replicated,
        flat_shards=not replicated,
        # FSDP1 materialises a meta-device module itself: to_empty + reset_parameters per module
        materialize=Materialize.BY_WRAPPER,
        refusals=(() if orig else (GROUPS_NEED_ORIG_PARAMS,))
        + muon_refusals(orig, None if replicated else {"world_size": lambda n: n > 1}),
    )


LAYOUTS = tuple(
    _layout(wrapper, sharding, orig, replicated)
    for wrapper, orig in (("fsdp1", False), ("fsdp1+orig", True))
    for sharding, replicated in (("full_shard", False), ("no_shard", True), ("shard_grad_op", False))
)

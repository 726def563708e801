"""A new layout as a contributor writes one: a module that defines a Layout and registers it
(here by the import of `--strategy tests.new_layout_plugin:STRATEGY`; in the package, by its
line in conformance/layout/registry.py). FSDP2 with fully_shard on the root module only, every
parameter in one group (what users write for a model without natural wrap units). A
registered strategy takes it (Supports.layouts) through get/set_state_dict and DCP: its
wrapper, the sanity check's expectations, the data ranks and its refusal all come from the
layout object, and nothing else of the suite is edited."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from conformance.case import Case
from conformance.layout.base import Layout
from conformance.layout.registry import register
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.protocol import ComposedStrategy
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage import STORAGES
from conformance.strategy.wrappers import fully_shard_fn
from conformance.world import RankContext


@dataclass(frozen=True)
class RootOnlyFsdp2:
    """fully_shard on the root only: one FSDP2 group holding every parameter."""

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        return fully_shard_fn()(model.to(ctx.device), mesh=mesh)


LAYOUT = register(
    Layout(
        "fsdp2+root",
        "shard",
        build=lambda case: RootOnlyFsdp2(),
        apis=STATE_APIS["fsdp2"],
        refusals=(({"world_size": 4}, "this example's layout is tried at 1 and 2 ranks only"),),
    )
)


def root_only(case: Case) -> ComposedStrategy:
    api = LAYOUT.apis["dsd_sharded"] if case.kind == "sharded" else LAYOUT.apis["dsd_full"]
    return ComposedStrategy(LAYOUT.build(case), api, STORAGES["dcp"])


STRATEGY = RegisteredStrategy(
    "root_only",
    root_only,
    Supports(
        wrappers=(),
        layouts=(LAYOUT.key,),
        kinds=("sharded",),
        checks=("reshard", "roundtrip"),
        models=("mlp",),
    ),
    storage="dcp",
)


# The same wrapper under a layout that claims every rank holds a whole copy: the sanity check
# reads the claim from the layout object and must catch it ("a replica must hold all").
CLAIMS_A_REPLICA = register(
    Layout(
        "fsdp2+rootreplica",
        "shard",
        build=lambda case: RootOnlyFsdp2(),
        apis=STATE_APIS["fsdp2"],
        replicated=True,
        refusals=LAYOUT.refusals,
    )
)


def claims_a_replica(case: Case) -> ComposedStrategy:
    return ComposedStrategy(
        CLAIMS_A_REPLICA.build(case), CLAIMS_A_REPLICA.apis["dsd_sharded"], STORAGES["dcp"]
    )


BROKEN = RegisteredStrategy(
    "root_only_claims_a_replica",
    claims_a_replica,
    Supports(
        wrappers=(),
        layouts=(CLAIMS_A_REPLICA.key,),
        kinds=("sharded",),
        checks=("roundtrip",),
        models=("mlp",),
    ),
    storage="dcp",
)

"""DDP: every rank a replica of the whole model, gradients all-reduced over the world."""

from __future__ import annotations

from conformance.construction.base import Materialize
from conformance.layout.base import KEYED_BY_INDEX, KEYED_BY_INDEX_CONVERTED, Layout, expert_models
from conformance.precision.registry import mixed
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.wrappers import DdpWrapper

LAYOUTS = (
    Layout(
        "ddp",
        "replicate",
        build=lambda case: DdpWrapper(),
        apis=STATE_APIS["ddp"],
        replicated=True,
        materialize=Materialize.BEFORE_WRAP,  # DDP broadcasts rank 0's values while wrapping
        load_refusals=(KEYED_BY_INDEX_CONVERTED,),
        property_reshards=False,  # one replica's state: a resharding property adds nothing
        refusals=(
            KEYED_BY_INDEX,
            (
                {"model": expert_models()},
                "DDP all-reduces every parameter over the whole world: experts held by some ranks "
                "only need their own groups",
            ),
            (
                {"precision": mixed},
                "DDP has no mixed-precision setting: autocast leaves the fp32 parameters, and so the "
                "checkpoint, unchanged",
            ),
        ),
    ),
)

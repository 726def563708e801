"""No wrapper: each rank trains its own whole model alone, its state taken with the plain module's
state_dict() or with get/set_state_dict (which take any module: the one layout where a parameter
keeps its grad_dtype meets them)."""

from __future__ import annotations

from conformance.construction.base import Materialize
from conformance.layout.base import KEYED_BY_INDEX, KEYED_BY_INDEX_CONVERTED, Layout
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.wrappers import PlainWrapper

LAYOUTS = (
    Layout(
        "plain",
        "none",
        build=lambda case: PlainWrapper(),
        apis=STATE_APIS["plain"],
        replicated=True,
        sanity_checked=False,
        keeps_grad_dtype=True,
        materialize=Materialize.BEFORE_WRAP,
        refusals=(KEYED_BY_INDEX,),
        load_refusals=(KEYED_BY_INDEX_CONVERTED,),
    ),
)

"""FSDP2 over wrap units that activation checkpointing or torch.compile wrapped first (their
parameter names gain a prefix the state dict must not keep)."""

from __future__ import annotations

from conformance.layout.base import Layout
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.prefixing import PrefixingFsdp2Wrapper

LAYOUTS = tuple(
    Layout(
        f"fsdp2+{option}",
        "shard",
        build=lambda case, wrap_with=wrap_with: PrefixingFsdp2Wrapper(wrap_with),
        apis=STATE_APIS["fsdp2"],
    )
    for option, wrap_with in (("ac", "checkpoint"), ("compile", "compile"))
)

"""FSDP2 on one dimension: fully_shard on every wrap unit and the root, with its options
(reshard_after_forward=False, CPUOffloadPolicy)."""

from __future__ import annotations

from conformance.case import Case
from conformance.layout.base import Layout
from conformance.precision.registry import precision_of
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.protocol import Wrapper
from conformance.strategy.wrappers import Fsdp2Wrapper


def fsdp2_wrapper(case: Case, **options: object) -> Wrapper:
    return Fsdp2Wrapper(mixed=precision_of(case.precision).fsdp2, **options)  # type: ignore[arg-type]


# FSDP2's CPUOffloadPolicy moves parameters to the device for compute and raises "Cannot access
# accelerator device when none is available" without one (torch 2.13, fully_shard with
# offload_policy=CPUOffloadPolicy() on a CPU-only machine).
NEEDS_ACCELERATOR = (
    "FSDP2's CPUOffloadPolicy needs an accelerator to compute on: 'Cannot access accelerator device "
    "when none is available'"
)

LAYOUTS = (
    Layout("fsdp2", "shard", build=fsdp2_wrapper, apis=STATE_APIS["fsdp2"]),
    Layout(
        "fsdp2+noreshard",
        "shard",
        build=lambda case: fsdp2_wrapper(case, reshard_after_forward=False),
        apis=STATE_APIS["fsdp2"],
    ),
    Layout(
        "fsdp2+offload",
        "shard",
        build=lambda case: fsdp2_wrapper(case, cpu_offload=True),
        apis=STATE_APIS["fsdp2"],
        needs_accelerator=NEEDS_ACCELERATOR,
    ),
)

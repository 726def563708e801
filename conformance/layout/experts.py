"""Experts as DTensors over a (dp, ep) mesh (torchtitan's MoE layout), FSDP2 over dp."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.case import Case
from conformance.layout.base import Layout, case_mesh, models_without
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.parallel import Fsdp2EpWrapper


@dataclass(frozen=True)
class ExpertParallel(Layout):
    def meshes(self, world_size: int) -> tuple[str, ...]:
        """The (dp, ep) meshes whose expert dimension shards the 4 experts: "DxE"."""
        return tuple(f"{world_size // e}x{e}" for e in (2, 4) if world_size % e == 0)

    def split_params(self, model_cls: type) -> tuple[str, dict[str, str]]:
        params = model_cls.ep_params() if hasattr(model_cls, "ep_params") else ()  # type: ignore[attr-defined]
        return "ep", {p: "expert parallelism shards it" for p in params}


def _wrapper(case: Case) -> Fsdp2EpWrapper:
    dp, ep = case_mesh(case)
    return Fsdp2EpWrapper((dp, ep))


LAYOUTS = (
    ExpertParallel(
        "fsdp2",
        "ep",
        build=_wrapper,
        apis=STATE_APIS["fsdp2"],
        refusals=(
            (
                {"model": models_without("ep_params")},
                "the model declares no expert parameters to shard over an expert-parallel mesh (ep_params)",
            ),
            ({"world_size": (1, 3)}, "the 4 experts shard over an expert dimension of 2 or 4 ranks"),
        ),
    ),
)

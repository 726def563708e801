"""Tensor parallelism: the model's plan (tp_plan) over every rank alone; FSDP2 over it on a
(dp, tp) mesh; HSDP over it on a (replicate, shard, tp) mesh. The ranks of one tensor-parallel
group train on the same batches."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.case import Case
from conformance.layout.base import Layout, case_mesh, models_without, tp_plan_params
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.parallel import Fsdp2TpWrapper, TpWrapper

NO_TP_PLAN = (
    {"model": models_without("tp_plan")},
    "the model declares no tensor-parallel plan (tp_plan): which of its layers are split "
    "column- or row-wise is the model's choice",
)


def tp_meshes(world_size: int) -> tuple[str, ...]:
    """Every (dp, tp) mesh of a world: "DxT"."""
    return tuple(f"{d}x{world_size // d}" for d in range(1, world_size + 1) if world_size % d == 0)


@dataclass(frozen=True)
class TensorParallel(Layout):
    """TP alone: one 1-D mesh of every rank, every rank the same batches."""

    def data_rank(self, case: Case, rank: int) -> int:
        return 0

    def split_params(self, model_cls: type) -> tuple[str, dict[str, str]]:
        return tp_plan_params(model_cls)

    def tp_degrees(self, world_size: int) -> tuple[tuple[str, int], ...]:
        return (("", world_size),)


@dataclass(frozen=True)
class Fsdp2OverTp(TensorParallel):
    """FSDP2 over TP: a (dp, tp) mesh; the ranks of one tp group the same batches."""

    def meshes(self, world_size: int) -> tuple[str, ...]:
        return tp_meshes(world_size)

    def data_rank(self, case: Case, rank: int) -> int:
        return rank // self.mesh_shape(case)[-1]

    def tp_degrees(self, world_size: int) -> tuple[tuple[str, int], ...]:
        return tuple((m, int(m.split("x")[-1])) for m in tp_meshes(world_size))


@dataclass(frozen=True)
class HsdpOverTp(Fsdp2OverTp):
    """HSDP + TP: (replicate 2, shard, tp 2); one copy spread over shard x tp ranks."""

    def meshes(self, world_size: int) -> tuple[str, ...]:
        return (f"2x{world_size // 4}x2",) if world_size % 4 == 0 else ("",)

    def group_size(self, case: Case, world_size: int) -> int:
        _, shard, tp = self.mesh_shape(case)
        return shard * tp

    def tp_degrees(self, world_size: int) -> tuple[tuple[str, int], ...]:
        return ()


LAYOUTS = (
    TensorParallel("tp", "tp", build=lambda case: TpWrapper(), apis=STATE_APIS["tp"], refusals=(NO_TP_PLAN,)),
    Fsdp2OverTp(
        "fsdp2",
        "tp",
        build=lambda case: Fsdp2TpWrapper(case_mesh(case)),
        apis=STATE_APIS["fsdp2"],
        refusals=(NO_TP_PLAN,),
    ),
    HsdpOverTp(
        "fsdp2",
        "hsdp_tp",
        build=lambda case: Fsdp2TpWrapper(case_mesh(case)),
        apis=STATE_APIS["fsdp2"],
        refusals=(
            NO_TP_PLAN,
            (
                {"world_size": (1, 2, 3, 5, 6, 7)},
                "HSDP + TP needs a (replicate 2, shard, tp 2) mesh: a multiple of 4 ranks",
            ),
        ),
    ),
)

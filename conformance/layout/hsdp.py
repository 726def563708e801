"""HSDP: a (replicate, shard) mesh, one copy sharded over each row and replicated across rows.
FSDP1's HYBRID_SHARD and HYBRID_SHARD_ZERO2, FSDP2's fully_shard on a 2-D mesh."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.case import Case
from conformance.layout.base import Layout, expert_models
from conformance.layout.fsdp1 import GROUPS_NEED_ORIG_PARAMS, fsdp1_wrapper, muon_refusals
from conformance.layout.fsdp2 import fsdp2_wrapper
from conformance.strategy.builtin import STATE_APIS


def hsdp_meshes(world_size: int) -> tuple[str, ...]:
    """Every (replicate, shard) mesh a world holds, as the mesh axis spells it: "" for (2, 2)
    at 4 ranks, the mesh the matrix had before the axis (its ids stay), "RxS" for the others.
    One rank: only "" (no HSDP: unsupported)."""
    if world_size < 2:
        return ("",)
    shapes = [(r, world_size // r) for r in range(1, world_size + 1) if world_size % r == 0]
    default = (2, world_size // 2) if world_size >= 4 else None
    return tuple("" if shape == default else f"{shape[0]}x{shape[1]}" for shape in shapes)


def hsdp_shape(case: Case) -> tuple[int, int]:
    """HSDP's (replicate, shard) mesh: the mesh axis, or (2, world_size / 2) by default."""
    if case.mesh_sizes:
        replicate, shard = case.mesh_sizes[:2]
        return replicate, shard
    return 2, case.world_size // 2


@dataclass(frozen=True)
class Hsdp(Layout):
    def meshes(self, world_size: int) -> tuple[str, ...]:
        return hsdp_meshes(world_size)

    def mesh_shape(self, case: Case) -> tuple[int, ...]:
        return hsdp_shape(case)

    def group_size(self, case: Case, world_size: int) -> int:
        return hsdp_shape(case)[1]


COMMON = (
    (
        {"world_size": (1, 3)},
        "HSDP needs a (replicate, shard) mesh of at least 2 ranks, and every mesh of the axis at 3 ranks is 1-D",
    ),
    ({"model": expert_models()}, "expert parallelism on an HSDP mesh is not built into the suite yet"),
)
NO_LOCAL = (
    {"api": "sd_local"},
    "FSDP1 refuses LOCAL_STATE_DICT with a DeviceMesh (HSDP): 'DeviceMesh is not compatible with "
    "LOCAL_STATE_DICT', by design",
)


def _shards(mesh: str) -> bool:
    """Whether an HSDP mesh (the mesh axis) shards each copy over 2+ ranks: its default does."""
    return not mesh or int(mesh.split("x")[1]) > 1


def _fsdp1(wrapper: str, sharding: str, orig: bool) -> Hsdp:
    return Hsdp(
        wrapper,
        sharding,
        build=lambda case: fsdp1_wrapper(case, use_orig_params=orig, hsdp_shape=hsdp_shape(case)),
        apis=STATE_APIS["fsdp1"],
        flat_shards=True,
        refusals=(*COMMON, NO_LOCAL)
        + (() if orig else (GROUPS_NEED_ORIG_PARAMS,))
        + muon_refusals(orig, {"mesh": _shards}),
    )


def _fsdp2(wrapper: str, **options: object) -> Hsdp:
    return Hsdp(
        wrapper,
        "hsdp",
        build=lambda case: fsdp2_wrapper(case, hsdp=True, hsdp_shape=hsdp_shape(case), **options),
        apis=STATE_APIS["fsdp2"],
        refusals=COMMON,
    )


LAYOUTS = (
    *(
        _fsdp1(wrapper, sharding, orig)
        for wrapper, orig in (("fsdp1", False), ("fsdp1+orig", True))
        for sharding in ("hybrid_shard", "hybrid_shard_zero2")
    ),
    _fsdp2("fsdp2"),
    _fsdp2("fsdp2+noreshard", reshard_after_forward=False),
)

"""FSDP1 over tensor parallelism: the model's plan on "tp", then FSDP1 (FULL_SHARD) on the "dp"
dimension of a (dp, tp) mesh, with and without use_orig_params: PyTorch's 2-D FSDP1 layout. A
rank holds its data-parallel shard of flat parameters made of its tensor-parallel pieces, and
FSDP1 records each piece's DTensorSpec (the harness makes them whole: conformance.check.flat_tp)."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.case import Case
from conformance.layout.base import Refusal, case_mesh
from conformance.layout.fsdp1 import GROUPS_NEED_ORIG_PARAMS, fsdp1_wrapper, muon_refusals
from conformance.layout.tensor_parallel import NO_TP_PLAN, Fsdp2OverTp, tp_meshes
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.parallel import Fsdp1TpWrapper
from conformance.strategy.protocol import Wrapper

NO_LOCAL_ON_A_MESH: Refusal = (
    {"api": "sd_local"},
    "FSDP1 refuses LOCAL_STATE_DICT with a DeviceMesh: 'DeviceMesh is not compatible with "
    "LOCAL_STATE_DICT', by design",
)


TWO_D: Refusal = (
    {"world_size": (1, 2, 3, 5, 7)},
    "FSDP1 over TP is built on (dp, tp) meshes whose dimensions are both at least 2: 4 ranks or more",
)


@dataclass(frozen=True)
class Fsdp1OverTp(Fsdp2OverTp):
    """As FSDP2 over TP: a (dp, tp) mesh, the ranks of one tp group the same batches; each
    weight of the plan split over "tp" (recorded by FSDP1 for its flat parameter). Only the
    meshes of both dimensions at least 2: a (1, n) mesh is tensor parallelism under an FSDP1
    of one rank, an (n, 1) mesh FSDP1 over a plan of one rank."""

    def meshes(self, world_size: int) -> tuple[str, ...]:
        two_d = tuple(m for m in tp_meshes(world_size) if min(int(d) for d in m.split("x")) >= 2)
        return two_d or ("",)


def _wrapper(case: Case, orig: bool) -> Wrapper:
    mesh = case_mesh(case)
    if len(mesh) != 2:
        raise ValueError(f"FSDP1 over TP needs a (dp, tp) mesh, the cell has {mesh}")
    return Fsdp1TpWrapper(
        (mesh[0], mesh[1]), fsdp1_wrapper(case, use_orig_params=orig, sharding="full_shard")
    )


def _layout(wrapper: str, orig: bool) -> Fsdp1OverTp:
    return Fsdp1OverTp(
        wrapper,
        "tp",
        build=lambda case: _wrapper(case, orig),
        apis=STATE_APIS["fsdp1"],
        flat_shards=True,
        property_reshards=False,
        refusals=(NO_TP_PLAN, NO_LOCAL_ON_A_MESH, TWO_D)
        + (() if orig else (GROUPS_NEED_ORIG_PARAMS,))
        + muon_refusals(orig, {}),  # its dp dimension is 2+ ranks (TWO_D)
    )


LAYOUTS = (_layout("fsdp1", False), _layout("fsdp1+orig", True))

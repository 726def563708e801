"""The canonical gather's pasted DTensors (conformance.check.pieces) are bitwise what each
DTensor's full_tensor() gives, on every DTensor layout: FSDP2 (evenly and unevenly sharded),
tensor parallelism, HSDP (a replicated mesh dimension), FSDP2 over TP (strided shards: not
pasted, gathered by full_tensor), expert parallelism and pipeline stages over FSDP2 (a DTensor
rank 0 does not hold)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance.matrix import cases
from conformance.world import WorldPool
from tests import snapshot_cells

# case id -> whether some of its DTensors are pasted (False: all through full_tensor)
LAYOUTS = {
    "fsdp2-dsd_sharded-dcp-adamw-mlp-w2": True,
    "fsdp2-dsd_full-dcp-adamw-mlp-w4": True,
    "fsdp2-dsd_full-dcp-adamw-moe-w4": True,
    "fsdp2_hsdp-dsd_sharded-dcp-adamw-mlp-w4": True,  # mesh 2x2
    "fsdp2_ep-dsd_sharded-dcp-adamw-moe_dtensor-w4-mesh2x2": True,
    "tp-dsd_full-dcp-adamw-llama-w2": True,
    "fsdp2_tp-dsd_full-dcp-adamw-llama-w4-mesh2x2": True,
    "pp_fsdp-dsd_full-dcp-adamw-llama-w4-mesh2x2": True,
}


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def _case(cell_id: str):  # type: ignore[no-untyped-def]
    found = [c for profile in ("default", "full") for c in cases(profile) if c.id == cell_id]
    assert found, f"{cell_id} is in no profile"
    return found[0]


@pytest.mark.parametrize("cell_id", sorted(LAYOUTS))
def test_pasted_is_bitwise_full_tensor(pool: WorldPool, cell_id: str) -> None:
    case = _case(cell_id)
    run = pool.run("gloo", case.world_size, snapshot_cells.both_ways, case, timeout_s=180)
    assert run.status == "ok", run.detail
    got = run.values[0]
    assert got["dtensors"], "the layout has no DTensor: the test would compare nothing"
    assert bool(got["pasted"]) == LAYOUTS[cell_id], got
    assert got["keys"] and got["types"], got
    assert not got["differences"], got["differences"]


def test_only_dtensors_every_rank_of_their_mesh_holds_are_pasted() -> None:
    """A DTensor one rank of its mesh lacks (a strategy left the ranks' states unlike each other)
    goes through full_tensor(), whose collectives then disagree as they always did: the cell's
    crash, never a gather of ours that cannot cover the tensor. One name on two meshes (each
    rank's expert) is pasted per mesh."""
    from conformance.check.pieces import held_by_every_rank_of_its_mesh

    by_rank = [
        {"a": (0, 1), "lost": (0, 1), "expert": (0, 1)},
        {"a": (0, 1), "expert": (0, 1)},
        {"expert": (2, 3), "moved": (2, 3)},
        {"expert": (2, 3), "moved": (0, 1, 2, 3)},
    ]
    assert held_by_every_rank_of_its_mesh(by_rank) == {"a", "expert"}

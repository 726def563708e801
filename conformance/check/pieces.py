"""DTensors made whole on rank 0 from every rank's piece, without a collective per tensor
(conformance.check.snapshot.full_state sends the pieces with its other ones, in one).

A DTensor whose placements are `Shard` and `Replicate` only holds, on each rank, one contiguous
block of the whole tensor: its local tensor, at the offset DTensor's own checkpoint code computes
(`compute_local_shape_and_global_offset`, which DCP's metadata uses). Rank 0 copies each block
into a tensor of the global shape. Where a mesh dimension replicates, the blocks come from the
ranks that share the reference rank's coordinate there (rank 0, or the lowest rank holding the
tensor where rank 0 does not), on that rank's own mesh (one name may live on several meshes: each
rank's expert of the expert-parallel model): the ranks full_tensor() on that rank gathers from, so
that the result is bitwise what full_tensor() gives it, replicas that differ included. Any other placement
(`Partial`, a strided shard) is not pasteable: full_state calls full_tensor() for it; so it does
for a DTensor some rank of its mesh does not hold (a strategy that left the ranks' states unlike
each other: the collectives then disagree as they did before, and the cell crashes or hangs, the
strategy's outcome, never a gather of ours that cannot cover the tensor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Piece:
    """One rank's block of a DTensor: its local values (on the CPU) and where they sit."""

    local: torch.Tensor
    offset: tuple[int, ...]
    global_shape: tuple[int, ...]
    mesh_ranks: tuple[int, ...]  # the ranks of its device mesh, in the mesh's order
    coordinate: tuple[int, ...]  # the rank's coordinate on that mesh
    replicated: tuple[int, ...]  # the mesh dimensions that replicate it


def pasteable(t: Any) -> bool:
    """Whether a DTensor's pieces are contiguous blocks (every placement Shard or Replicate,
    exactly those types: a strided shard is a subclass of Shard whose blocks interleave)."""
    from torch.distributed.tensor import Replicate, Shard

    return all(type(p) in (Shard, Replicate) for p in t.placements)


def mesh_ranks(t: Any) -> tuple[int, ...]:
    """The ranks of a DTensor's device mesh, in the mesh's order."""
    return tuple(t.device_mesh.mesh.reshape(-1).tolist())


def held_by_every_rank_of_its_mesh(by_rank: list[dict[str, tuple[int, ...]]]) -> set[str]:
    """The keys to paste, from every rank's pasteable DTensors (key -> its mesh's ranks): those
    that every rank of each holder's mesh holds, on the same mesh. The same set on every rank."""
    keys = {k for held in by_rank for k in held}
    return {
        k
        for k in keys
        if all(
            all(by_rank[m].get(k) == ranks for m in ranks if m < len(by_rank))
            for ranks in (held[k] for held in by_rank if k in held)
        )
    }


def piece_of(t: Any) -> Piece:
    """This rank's block of a pasteable DTensor."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = t.to_local().detach().cpu().clone()
    shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    if tuple(local.shape) != tuple(shape):
        raise ValueError(
            f"a DTensor of global shape {tuple(t.shape)} and placements {t.placements} holds a local "
            f"tensor of shape {tuple(local.shape)} on this rank, where its placements give {tuple(shape)}"
        )
    coordinate = t.device_mesh.get_coordinate()
    return Piece(
        local,
        tuple(offset),
        tuple(t.shape),
        mesh_ranks(t),
        tuple(coordinate or ()),
        tuple(d for d, p in enumerate(t.placements) if isinstance(p, Replicate)),
    )


def paste_pieces(by_rank: list[dict[str, Piece]]) -> dict[str, torch.Tensor]:
    """Every DTensor whole, from the ranks' pieces (by_rank[r]: rank r's, by key)."""
    out: dict[str, torch.Tensor] = {}
    for key in sorted({k for pieces in by_rank for k in pieces}):
        holders = [r for r, pieces in enumerate(by_rank) if key in pieces]
        reference = by_rank[holders[0]][key]
        dims = reference.replicated
        chosen = [  # of the reference's own mesh (one name may live on several: each rank's expert)
            by_rank[r][key]
            for r in holders
            if by_rank[r][key].mesh_ranks == reference.mesh_ranks
            and all(by_rank[r][key].coordinate[d] == reference.coordinate[d] for d in dims)
        ]
        whole = torch.empty(reference.global_shape, dtype=reference.local.dtype)
        covered = 0
        for piece in chosen:
            if piece.global_shape != reference.global_shape or piece.local.dtype != reference.local.dtype:
                raise ValueError(f"{key}: the ranks' pieces disagree on the global shape or dtype")
            block = tuple(slice(o, o + n) for o, n in zip(piece.offset, piece.local.shape, strict=True))
            whole[block] = piece.local
            covered += piece.local.numel()
        if covered != whole.numel():
            raise ValueError(
                f"{key}: the pieces of the ranks that share the reference rank's replica cover "
                f"{covered} of {whole.numel()} elements"
            )
        out[key] = whole
    return out

"""The harness's own view of the training state, taken without the strategy under test.

`local_state` reads each rank's raw pieces: the parameters as they live on the rank (FSDP1
flat-parameter shards, the local tensor of FSDP2 DTensors, DDP replicas), every buffer, every
optimizer state entry by parameter name, and every param_group hyperparameter.

`full_state` gathers these to rank 0 with collectives of our own (never a state-dict API):
DTensors through full_tensor(); FSDP1 shards by concatenating every rank's flat shard in
rank order (the padded flat parameter); replicated values as rank 0's copy.

Buffers are per rank under FSDP (BatchNorm running stats are not synced), so the full state
holds rank 0's copy of every buffer, and each rank's own copy is compared in its local state.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from conformance.check.compare import ForeignMesh
from conformance.check.flat_tp import over_tensor_parallel, whole_tensors
from conformance.check.names import clean_name
from conformance.check.pieces import (
    Piece,
    held_by_every_rank_of_its_mesh,
    mesh_ranks,
    paste_pieces,
    pasteable,
    piece_of,
)
from conformance.strategy.protocol import StateView, is_state_view
from conformance.world import RankContext
from conformance.world.attribution import code_under_test

Snapshot = dict[str, Any]
# an optimizer, or what holds a framework's optimizer state (TrainState.optimizers)
Optimizers = torch.optim.Optimizer | Sequence[torch.optim.Optimizer | StateView]


def _is_dtensor(t: Any) -> bool:
    return type(t).__name__ == "DTensor"


def _misfit(mesh: Any, world_size: int) -> str:
    """What of a device mesh does not fit this world ("" when it fits): ranks the world lacks,
    or a dimension whose process group is not of the mesh's size here."""
    outside = sorted(r for r in mesh.mesh.reshape(-1).tolist() if r >= world_size)
    if outside:
        return f"ranks {outside} are not in it"
    for d in range(mesh.ndim):
        try:
            size = dist.get_world_size(mesh.get_group(d))
        except Exception as exc:  # a mesh without this world's groups
            return f"its process groups are not this world's: {type(exc).__name__}"
        if size != mesh.size(d):
            return f"dimension {d} spans {mesh.size(d)} ranks, its process group {size}"
    return ""


def foreign_mesh(t: Any, world_size: int) -> ForeignMesh | None:
    """A marker for a DTensor whose device mesh is not of this world (None when it is): a load
    that left state on the saving world's mesh (torch.load of DTensors saved at another world
    size rebuilds their mesh as it was). Its full_tensor() would raise or gather over the wrong
    ranks, so the snapshot never calls it: the comparer reports the marker (kind `mesh`). Asked
    of this rank alone: no collective."""
    why = _misfit(t.device_mesh, world_size)
    return ForeignMesh(str(t.device_mesh), world_size, t.dtype, tuple(t.shape), why) if why else None


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """A copy of this rank's piece of a tensor (the local shard of a DTensor), on the CPU."""
    if _is_dtensor(t):
        t = t.to_local()  # type: ignore[attr-defined]
    return t.detach().cpu().clone()


def _stray_key(key: object) -> str:
    """How a key of optimizer.state that is none of the model's parameters reads: a tensor the
    model does not hold, or anything else a load left there (Optimizer.load_state_dict keeps a
    saved key it cannot map to a parameter, a name for example, as it is)."""
    if isinstance(key, torch.Tensor):
        return f"<unnamed parameter {tuple(key.shape)}>"
    return f"<not a parameter: {key!r}>"


def holders(optim: Optimizers) -> tuple[torch.optim.Optimizer | StateView, ...]:
    """What to read: one torch optimizer, or the holders a framework has: the torch optimizers
    of a container, or a StateView (TrainState.optimizers; conformance.strategy.owned)."""
    return (optim,) if isinstance(optim, torch.optim.Optimizer) else tuple(optim)


def _parameters(model: nn.Module, optimizers: Sequence[Any]) -> list[tuple[str, Any]]:
    """The parameters by name: as they live on the rank, or whole through a StateView (the
    framework partitions them where the model cannot show them)."""
    views = [o for o in optimizers if is_state_view(o)]
    if not views:
        return list(model.named_parameters())
    with code_under_test("the framework's state view (TrainState.holders): its parameters"):
        return list(views[0].parameters_by_name().items())


def _optimizer_state(optimizers: Sequence[Any]) -> tuple[list[tuple[Any, Any]], list[dict[str, Any]]]:
    """(param, entries) of every holder's state and every holder's param groups, in order
    (a StateView's reads are the framework's code)."""
    viewed = any(is_state_view(o) for o in optimizers)
    reading = "the framework's state view (TrainState.holders): its optimizer state"
    with code_under_test(reading) if viewed else contextlib.nullcontext():
        entries = [(param, dict(e)) for o in optimizers for param, e in o.state.items()]
        groups = [dict(g) for o in optimizers for g in o.param_groups]
    return entries, groups


def _without_padding(param: Any, value: Any) -> Any:
    """An optimizer state tensor of an FSDP1 flat-parameter shard with the shard's padding
    (`_shard_numel_padded` trailing elements, which no parameter owns and which no checkpoint API
    saves) set to zero, on a copy: what an optimizer keeps there (Adamax's eps, Rprop's initial
    step size) never reaches a parameter, so the comparison leaves it out. Any other value as it is."""
    padded = getattr(param, "_shard_numel_padded", 0)
    if not padded or not isinstance(value, torch.Tensor) or value.shape != param.shape or value.dim() != 1:
        return value
    value = value.detach().clone()
    value[value.numel() - padded :] = 0
    return value


def _raw_state(model: nn.Module, optim: Optimizers, stateful: Mapping[str, Any] | None) -> Snapshot:
    """Every state value as it lives on this rank (DTensors kept as DTensors). The param groups
    of several optimizers are numbered on, in their order."""
    names = {id(p): clean_name(n) for n, p in model.named_parameters()}
    optimizers = holders(optim)
    out: Snapshot = {}
    for name, param in _parameters(model, optimizers):
        out[f"param/{clean_name(name)}"] = param
    for name, buf in model.named_buffers():
        out[f"buffer/{clean_name(name)}"] = buf
    state, groups = _optimizer_state(optimizers)
    for param, entries in state:
        pname = names.get(id(param)) or _stray_key(param)
        for key, value in entries.items():
            out[f"optim/{pname}/{key}"] = _without_padding(param, value)
    for i, group in enumerate(groups):
        for key, value in group.items():
            if key == "params":
                value = [names.get(id(p), "<unnamed>") for p in value]
            out[f"param_groups/{i}/{key}"] = value
    for name, holder in (stateful or {}).items():  # the LR scheduler, the loss scaler
        for key, value in holder.state_dict().items():
            out[f"{name}/{key}"] = value
    return out


def local_state(model: nn.Module, optim: Optimizers, stateful: Mapping[str, Any] | None = None) -> Snapshot:
    """This rank's pieces, copied (tensors to the CPU): safe to keep while training goes on."""
    return {
        k: local_tensor(v) if isinstance(v, torch.Tensor) else copy.deepcopy(v)
        for k, v in _raw_state(model, optim, stateful).items()
    }


def local_buffers(model: nn.Module) -> Snapshot:
    """This rank's buffers, copied, keyed as local_state keys them."""
    return {f"buffer/{clean_name(name)}": local_tensor(buf) for name, buf in model.named_buffers()}


def full_state(
    model: nn.Module,
    optim: Optimizers,
    stateful: Mapping[str, Any] | None,
    ctx: RankContext,
    *,
    sharded: bool,
    paste: bool = True,
) -> Snapshot | None:
    """The whole state, gathered on rank 0 (None on the other ranks). A collective.

    sharded: whether plain (non-DTensor) parameters and optimizer tensors are shards of one
    flat parameter (FSDP1 with a sharding strategy) rather than replicas. paste: a DTensor
    sharded and replicated only (Shard, Replicate) is made whole on rank 0 from every rank's
    piece, sent with the other pieces in one collective (conformance.check.pieces); False, and
    for every other placement, through its own full_tensor() (a collective per tensor): the
    same values, bitwise (tests/test_snapshot_paste.py), at several times the cost.
    """
    raw = _raw_state(model, optim, stateful)
    full: Snapshot = {}
    pieces: Snapshot = {}
    placed: dict[str, Piece] = {}
    if sharded and over_tensor_parallel(model):  # FSDP1 over DTensors: conformance.check.flat_tp
        wholes, consumed = whole_tensors(model, raw, ctx)
        full.update(wholes)
        raw = {k: v for k, v in raw.items() if k not in consumed}
    foreign = {k: foreign_mesh(v, ctx.world_size) for k, v in raw.items() if _is_dtensor(v)}
    readable = [k for k, marker in foreign.items() if marker is None]
    # One exchange tells every rank which DTensors each rank could paste (on which mesh) and which
    # tensors each makes whole here; then every rank takes the same decisions (pasting, owners).
    pasteable_here = {k: mesh_ranks(raw[k]) for k in readable if paste and pasteable(raw[k])}
    whole_here = sorted({k for k, v in full.items() if isinstance(v, torch.Tensor)} | set(readable))
    told: list[tuple[dict[str, tuple[int, ...]], list[str]]] = [({}, []) for _ in range(ctx.world_size)]
    dist.all_gather_object(told, (pasteable_here, whole_here))
    pasting = held_by_every_rank_of_its_mesh([candidates for candidates, _ in told])
    for key in sorted(raw):
        value = raw[key]
        if _is_dtensor(value):
            if foreign[key] is not None:  # the strategy's load left it there: reported, never read
                full[key] = foreign[key]
                continue
            if key in pasting:  # the same decision on every rank
                placed[key] = piece_of(value)
                continue
            full[key] = value.full_tensor().detach().cpu().clone()  # type: ignore[attr-defined]
        elif isinstance(value, torch.Tensor):
            pieces[key] = value.detach().cpu().clone()
        elif key.endswith("/params"):  # a param group's names: a pipeline stage lists its own
            pieces[key] = list(value)
        else:
            full[key] = copy.deepcopy(value)
    # A DTensor rank 0 does not hold itself (a later pipeline stage's, made whole over that
    # stage's FSDP group) comes from the lowest rank that holds it. Python values stay rank 0's
    # (every rank's are compared in its local state).
    wholes = {k for k in full if isinstance(full[k], torch.Tensor)}
    owner: dict[str, int] = {}
    for r, (_, keys) in enumerate(told):
        for key in keys:
            if key not in pasting:
                owner.setdefault(key, r)
    elsewhere = {k: full[k] for k in wholes if ctx.rank != 0 and owner[k] == ctx.rank}
    sent: list[tuple[Snapshot, Snapshot, dict[str, Piece]]] | None = (
        [({}, {}, {}) for _ in range(ctx.world_size)] if ctx.rank == 0 else None
    )
    dist.gather_object((pieces, elsewhere, placed), sent, dst=0)
    if sent is None:
        return None
    gathered = [rank_pieces for rank_pieces, _, _ in sent]
    for _, rank_elsewhere, _ in sent:
        full.update(rank_elsewhere)
    full.update(paste_pieces([rank_placed for _, _, rank_placed in sent]))
    for key in [k for k in pieces if k.endswith("/params")]:  # every rank's names, first seen first
        names: list[str] = []
        for rank_pieces in gathered:
            names += [n for n in rank_pieces.get(key, []) if n not in names]
        full[key] = names
        for rank_pieces in gathered:
            rank_pieces.pop(key, None)
    # A rank whose shard of a parameter is empty (use_orig_params) keeps no optimizer state
    # for it: the keys are the union over ranks, and a missing piece is an empty one.
    for key in sorted({k for g in gathered for k in g}):
        held = [g[key] for g in gathered if key in g]
        shard = sharded and held[0].dim() > 0 and not key.startswith("buffer/")
        if shard:
            full[key] = torch.cat([piece.reshape(-1) for piece in held])
        else:
            full[key] = held[0]  # replicated, a scalar (step), or a per-rank buffer: the lowest rank's copy
    return full


def count_elements(snapshot: Snapshot) -> tuple[int, int]:
    """(tensor entries, elements) in a snapshot: shown in every pass detail."""
    tensors = [v for v in snapshot.values() if isinstance(v, torch.Tensor)]
    return len(tensors), sum(t.numel() for t in tensors)

"""FSDP1 over tensor parallelism: flat parameters whose pieces are DTensor shards.

FSDP1 given a model whose parameters are DTensors (a tensor-parallel plan applied first, FSDP1
on the data-parallel dimension of a (dp, tp) mesh) flattens each parameter's local shard and
keeps its DTensorSpec beside it (the FlatParameter's `_param_extensions`; None for a parameter
the plan left whole). A rank then holds, of each flat parameter, its data-parallel shard of the
flattened local pieces of its tensor-parallel coordinate: neither a shard of the whole flat
parameter (what `snapshot.full_state` concatenates over every rank for FSDP1 alone) nor a
DTensor.

`whole_tensors` makes the whole tensors of such a model with collectives of our own: each
piece gathered over the flat parameter's data-parallel group (its process group, in group-rank
order), split into the original parameters with the FlatParameter's own layout (its local
shapes and alignment padding; with use_orig_params each original parameter is a key of its
own already), each made a DTensor again from its recorded spec (`DTensor.from_local`) and then
whole (`full_tensor()`). Optimizer state follows its parameter; a flat parameter's 0-dim state
(`step`) becomes each original parameter's. `tp_specs` says which parameters the flat
parameters record as tensor-parallel shards, for the sanity check.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from conformance.check.names import clean_name
from conformance.world import RankContext

FLAT = "_flat_param"


@dataclass(frozen=True)
class Unit:
    """One FSDP1 unit: the clean prefix of its parameters, its flat parameter, its group."""

    prefix: str
    flat: Any
    group: Any

    def originals(self) -> list[tuple[str, tuple[int, ...], Any]]:
        """(clean name, local shape, spec or None) of each original parameter, in order."""
        return [
            (self.prefix + clean_name(fqn), tuple(shape), spec)
            for fqn, shape, spec in zip(self.flat._fqns, self.flat._shapes, self.flat._param_extensions)
        ]


def units(model: nn.Module) -> list[Unit]:
    """The FSDP1 units of a model (modules whose handle holds a FlatParameter), in module order."""
    out = []
    for name, module in model.named_modules():
        flat = getattr(getattr(module, "_handle", None), "flat_param", None)
        if flat is None or not hasattr(flat, "_param_extensions"):
            continue
        prefix = clean_name(name) + "." if clean_name(name) else ""
        out.append(Unit(prefix, flat, getattr(module, "process_group", None)))
    return out


def over_tensor_parallel(model: nn.Module) -> bool:
    """Whether FSDP1 flattened DTensor shards in this model (some recorded spec)."""
    return any(spec is not None for u in units(model) for _, _, spec in u.originals())


def tp_specs(model: nn.Module) -> dict[str, Any]:
    """Clean parameter name -> the DTensorSpec FSDP1 recorded for it (parameters it flattened as
    DTensor shards only)."""
    return {name: spec for u in units(model) for name, _, spec in u.originals() if spec is not None}


def _keys_of(unit: Unit, raw: dict[str, Any], orig: bool) -> list[str]:
    names = [n for n, _, _ in unit.originals()] if orig else [unit.prefix + FLAT]
    return sorted(
        k
        for k in raw
        if isinstance(raw[k], torch.Tensor)
        and type(raw[k]).__name__ != "DTensor"  # whole through full_tensor() as any DTensor
        and k.partition("/")[0] in ("param", "optim")
        and _name_of(k) in names
    )


def _name_of(key: str) -> str:
    section, _, rest = key.partition("/")
    return rest.rpartition("/")[0] if section == "optim" else rest


def _gathered(unit: Unit, keys: list[str], raw: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Each key's pieces over the unit's data-parallel group, concatenated in group-rank order
    (a missing piece is an empty one); a 0-dim value is the lowest rank's."""
    mine = {k: raw[k].detach().cpu().clone() for k in keys if k in raw}
    size = dist.get_world_size(unit.group)
    every: list[dict[str, torch.Tensor]] = [{} for _ in range(size)]
    dist.all_gather_object(every, mine, group=unit.group)
    out = {}
    for key in sorted({k for pieces in every for k in pieces}):
        held = [pieces[key] for pieces in every if key in pieces]
        out[key] = held[0] if held[0].dim() == 0 else torch.cat([p.reshape(-1) for p in held])
    return out


def _split(unit: Unit, flat: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """A gathered flat value split into the original parameters' local pieces (padding left out)."""
    originals = iter(unit.originals())
    offset = 0
    for numel, padding in zip(unit.flat._numels_with_padding, unit.flat._is_padding_mask):
        if not padding:
            name, shape, _ = next(originals)
            yield name, flat[offset : offset + numel].reshape(shape)
        offset += numel


def _whole(local: torch.Tensor, spec: Any) -> torch.Tensor:
    """The whole tensor of a local piece of a DTensor of `spec` (a collective over its mesh)."""
    if spec is None:
        return local
    from torch.distributed.tensor import DTensor

    dtensor = DTensor.from_local(local, spec.mesh, spec.placements, shape=spec.shape, stride=spec.stride)
    return dtensor.full_tensor().detach().cpu().clone()


MISSING = "missing on some data-parallel group"  # what a value held by only some groups becomes


def _locals(unit: Unit, keys: list[str], gathered: dict[str, torch.Tensor], orig: bool) -> dict[str, Any]:
    """Each key's value of this rank's tensor-parallel coordinate: a 0-dim value as it is, else
    (the original parameter's name, its local piece); None where this coordinate's data-parallel
    group holds none of it (or not of the local shape)."""
    shapes = {n: s for n, s, _ in unit.originals()}
    out: dict[str, Any] = {}
    for key in keys:
        value = gathered.get(key)
        section, _, rest = key.partition("/")
        entry = rest.rpartition("/")[2] if section == "optim" else ""
        suffix = f"/{entry}" if entry else ""
        if value is not None and value.dim() == 0:
            names = [_name_of(key)] if orig else list(shapes)
            out.update({f"{section}/{n}{suffix}": value.clone() for n in names})
        elif orig:
            shape = shapes[_name_of(key)]
            fits = value is not None and value.numel() == torch.Size(shape).numel()
            out[key] = (_name_of(key), value.reshape(shape)) if fits else None
        elif value is not None:
            out.update({f"{section}/{n}{suffix}": (n, local) for n, local in _split(unit, value)})
    return out


def whole_tensors(model: nn.Module, raw: dict[str, Any], ctx: RankContext) -> tuple[dict[str, Any], set[str]]:
    """The whole tensors of every parameter and optimizer state entry of a model FSDP1 wrapped
    over DTensors, by original parameter name, on every rank (a collective); `raw` is this
    rank's state (snapshot._raw_state). Keys as `raw`'s, the flat parameter's name replaced by
    each original parameter's; a value that some data-parallel group does not hold is MISSING
    (never made up, and no rank waits in a collective the others skip). Also the keys of `raw`
    these replace."""
    out: dict[str, Any] = {}
    consumed: set[str] = set()
    flat_keys = any(_name_of(k).endswith(FLAT) for k in raw if k.startswith("param/"))
    for unit in units(model):
        specs = {name: spec for name, _, spec in unit.originals()}
        keys = _keys_of(unit, raw, orig=not flat_keys)
        consumed.update(keys)
        every: list[list[str]] = [[] for _ in range(ctx.world_size)]
        dist.all_gather_object(every, keys)  # every rank walks the same keys: the world's union
        keys = sorted({k for ks in every for k in ks})
        local = _locals(unit, keys, _gathered(unit, keys, raw), orig=not flat_keys)
        held: list[list[str]] = [[] for _ in range(ctx.world_size)]
        dist.all_gather_object(held, sorted(k for k, v in local.items() if v is not None))
        names = sorted({k for h in held for k in h})
        for key in names:
            value = local.get(key)
            if not all(key in h for h in held):
                out[key] = MISSING
            elif isinstance(value, torch.Tensor):  # 0-dim
                out[key] = value
            else:
                name, piece = value
                out[key] = _whole(piece, specs[name])
    return out, consumed

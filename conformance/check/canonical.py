"""A view of the training state that does not depend on the wrapper or the world size.

One whole tensor per original parameter name, and optimizer state by that name, so a state
saved by one configuration can be compared with what another configuration loaded (a
resharded world, another wrapper). Built on rank 0 from `full_state`, the harness's own
gather, never from a state-dict API:

- DTensors (FSDP2) are already whole; DDP replicas are rank 0's copy.
- FSDP1 flat parameters (use_orig_params=False): the gathered flat parameter is split back
  into its original parameters with the FlatParameter's own layout (names, numels with
  alignment padding, shapes); a flat optimizer state tensor follows the same layout, and the
  flat parameter's `step` becomes each original parameter's.
- FSDP1 use_orig_params=True: each parameter's gathered 1-D pieces take the plain model's shape,
  or, for a parameter the plain model lacks (a strategy's wrap that adds some: PEFT's LoRA
  weights), the shape FSDP1's FlatParameter recorded for it.
- param_groups list original names, sorted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from conformance.check.snapshot import Optimizers, Snapshot, clean_name, full_state
from conformance.world import RankContext

# flat parameter name -> its pieces in order: (original name or None for padding, numel, shape)
Layout = list[tuple[str | None, int, tuple[int, ...]]]


def flat_layouts(model: nn.Module) -> dict[str, Layout]:
    """The layout of every FSDP1 FlatParameter of the model, by its clean name."""
    out: dict[str, Layout] = {}
    for name, param in model.named_parameters():
        fqns = getattr(param, "_fqns", None)
        if fqns is None:
            continue
        flat_name = clean_name(name)
        prefix = flat_name.removesuffix("_flat_param")
        originals = iter(zip(fqns, param._shapes))  # type: ignore[attr-defined]
        layout: Layout = []
        for numel, padding in zip(param._numels_with_padding, param._is_padding_mask):  # type: ignore[attr-defined]
            if padding:
                layout.append((None, numel, ()))
            else:
                fqn, shape = next(originals)
                layout.append((prefix + clean_name(fqn), numel, tuple(shape)))
        out[flat_name] = layout
    return out


def recorded_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """The original shape of every parameter an FSDP1 unit flattened, by its clean name, as the
    unit's FlatParameter recorded it (`_fqns`, `_shapes`, relative to the unit)."""
    out: dict[str, tuple[int, ...]] = {}
    for prefix, module in model.named_modules():
        flat = getattr(getattr(module, "_handle", None), "flat_param", None)
        fqns = getattr(flat, "_fqns", None)
        if fqns is None:
            continue
        for fqn, shape in zip(fqns, flat._shapes):  # type: ignore[union-attr]
            out[clean_name(f"{prefix}.{fqn}" if prefix else fqn)] = tuple(shape)
    return out


def _split(value: torch.Tensor, layout: Layout) -> dict[str, torch.Tensor]:
    pieces, offset = {}, 0
    for fqn, numel, shape in layout:
        if fqn is not None:
            pieces[fqn] = value[offset : offset + numel].reshape(shape).clone()
        offset += numel
    return pieces


def canonicalize(full: Snapshot, layouts: dict[str, Layout], shapes: dict[str, tuple[int, ...]]) -> Snapshot:
    """`full` (rank 0's gathered state) by original parameter names; see the module doc."""
    out: Snapshot = {}
    for key, value in full.items():
        section, _, rest = key.partition("/")
        if section in ("param", "optim"):
            name, _, entry = rest.rpartition("/") if section == "optim" else (rest, "", "")
            suffix = f"/{entry}" if entry else ""
            if name in layouts and isinstance(value, torch.Tensor):
                if value.dim() == 0:  # a flat parameter's step: every original parameter's
                    for fqn, _, _ in layouts[name]:
                        if fqn is not None:
                            out[f"{section}/{fqn}{suffix}"] = value.clone()
                else:
                    for fqn, piece in _split(value.reshape(-1), layouts[name]).items():
                        out[f"{section}/{fqn}{suffix}"] = piece
                continue
            shape = shapes.get(name)
            reshape = (
                isinstance(value, torch.Tensor) and value.dim() > 0 and shape and tuple(value.shape) != shape
            )
            if reshape and value.numel() == torch.Size(shape).numel():
                value = value.reshape(shape)
            out[key] = value
        elif section == "param_groups" and rest.endswith("/params"):
            names: list[str] = []
            for n in value:
                names += [f for f, _, _ in layouts[n] if f is not None] if n in layouts else [n]
            out[key] = sorted(names)
        else:
            out[key] = value
    return out


def canonical_state(
    model: nn.Module,
    optim: Optimizers,
    stateful: Mapping[str, Any] | None,
    ctx: RankContext,
    *,
    sharded: bool,
    plain: nn.Module,
) -> Snapshot | None:
    """The canonical state on rank 0 (None elsewhere). A collective. `plain`: the unwrapped
    model of the same architecture, for the original shapes."""
    full = full_state(model, optim, stateful, ctx, sharded=sharded)
    if full is None:
        return None
    shapes = {clean_name(n): tuple(p.shape) for n, p in plain.named_parameters()}
    return canonicalize(full, flat_layouts(model), {**recorded_shapes(model), **shapes})

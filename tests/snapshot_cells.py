"""A cell function for tests/test_snapshot_paste.py: a layout's state trained a step, gathered on
rank 0 twice, with DTensors pasted from the ranks' pieces and through full_tensor() each."""

from __future__ import annotations

from typing import Any

import torch

from conformance.case import Case
from conformance.check.compare import compare_states
from conformance.check.pieces import pasteable
from conformance.check.roundtrip import flat_sharded, fresh_state
from conformance.check.snapshot import _is_dtensor, _raw_state, full_state
from conformance.layout.builtin import builtin_strategy
from conformance.training import train_state
from conformance.world import RankContext


def both_ways(ctx: RankContext, case: Case) -> dict[str, Any] | None:
    state = fresh_state(builtin_strategy(case), case, ctx, seed=ctx.seed)
    train_state(state, ctx, case, steps=1)
    raw = _raw_state(state.model, state.optimizers, state.stateful)
    dtensors = [k for k, v in raw.items() if _is_dtensor(v)]
    pasted_here = [k for k in dtensors if pasteable(raw[k])]
    sharded = flat_sharded(case, ctx.world_size)
    pasted = full_state(state.model, state.optimizers, state.stateful, ctx, sharded=sharded, paste=True)
    each = full_state(state.model, state.optimizers, state.stateful, ctx, sharded=sharded, paste=False)
    if pasted is None or each is None:
        return None
    return {
        "differences": [str(d) for d in compare_states(each, pasted)],
        "keys": (sorted(each) == sorted(pasted)),
        "types": all(
            type(pasted[k]) is type(each[k])
            and (not isinstance(each[k], torch.Tensor) or each[k].stride() == pasted[k].stride())
            for k in each
        ),
        "dtensors": len(dtensors),
        "pasted": len(pasted_here),
    }

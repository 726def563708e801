"""A cell function for tests/test_flat_tp.py: FSDP1 over tensor parallelism on a (2, 2) mesh,
untrained, with optimizer state set to twice each parameter; the harness's canonical state
(check.flat_tp through snapshot.full_state) must give back the plain model's weights, and twice
them, bitwise."""

from __future__ import annotations

from typing import Any

import torch

from conformance.check.canonical import canonical_state
from conformance.models import build_model
from conformance.strategy.parallel import Fsdp1TpWrapper
from conformance.strategy.wrappers import Fsdp1Wrapper
from conformance.world import RankContext


def canonical_is_the_plain_model(ctx: RankContext, orig: bool) -> dict[str, Any] | None:
    wrapper = Fsdp1TpWrapper((2, 2), Fsdp1Wrapper("full_shard", use_orig_params=orig))
    model = wrapper.wrap(build_model("mlp", 0), ctx)
    optim = torch.optim.AdamW(model.parameters())
    for param in model.parameters():  # what a step would make, of values we know
        optim.state[param] = {"exp_avg": param.detach().clone() * 2, "step": torch.tensor(3.0)}
    plain = build_model("mlp", 0)
    state = canonical_state(model, optim, None, ctx, sharded=True, plain=plain)
    if state is None:
        return None
    out: dict[str, Any] = {}
    for name, param in plain.named_parameters():
        got, twice = state.get(f"param/{name}"), state.get(f"optim/{name}/exp_avg")
        out[name] = (
            isinstance(got, torch.Tensor)
            and torch.equal(got, param.detach())
            and isinstance(twice, torch.Tensor)
            and torch.equal(twice, param.detach() * 2)
            and float(state.get(f"optim/{name}/step", -1)) == 3.0
        )
    return out

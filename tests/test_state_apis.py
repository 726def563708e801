"""The state-dict APIs' own logic that runs without a world: the optimizer key conversion."""

from __future__ import annotations

import torch

from conformance.models import build_model
from conformance.strategy.state_apis import KnowsTheModel


def _osd_by_index(step: bool) -> dict:
    model = build_model("mlp", seed=0)
    optim = torch.optim.AdamW(model.parameters(), lr=0.01)
    if step:
        inputs, _ = type(model).batch(torch.Generator().manual_seed(0))
        model(inputs).sum().backward()
        optim.step()
    return optim.state_dict()


def test_an_index_keyed_dict_is_rekeyed_by_name() -> None:
    api = KnowsTheModel(model="mlp")
    names = [name for name, _ in build_model("mlp", seed=0).named_parameters()]
    rekeyed = api.by_name(_osd_by_index(step=True))
    assert sorted(rekeyed["param_groups"][0]["params"]) == sorted(names)
    assert set(rekeyed["state"]) == set(names)


def test_a_name_keyed_dict_is_left_as_it_is_even_with_no_state() -> None:
    api = KnowsTheModel(model="mlp")
    by_name = api.by_name(_osd_by_index(step=True))
    assert api.by_name(by_name) is by_name
    empty = {"state": {}, "param_groups": [{"lr": 0.01, "params": ["layer.weight"]}]}
    assert api.by_name(empty) is empty
    assert api.by_name({}) == {}

"""The comparer catches every kind of difference, and says what differs."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.check.compare import compare_states, compare_tensors


def adam_state() -> dict[str, object]:
    gen = torch.Generator().manual_seed(0)
    return {
        "param/fc1.weight": torch.randn(4, 3, generator=gen),
        "optim/fc1.weight/exp_avg": torch.randn(4, 3, generator=gen),
        "optim/fc1.weight/exp_avg_sq": torch.rand(4, 3, generator=gen),
        "optim/fc1.weight/step": torch.tensor(3.0),
        "param_groups/0/lr": 0.01,
        "param_groups/0/betas": (0.9, 0.99),
        "param_groups/0/params": ["fc1.weight"],
    }


def diff(change) -> list[str]:  # type: ignore[no-untyped-def]
    expected = adam_state()
    actual = copy.deepcopy(expected)
    change(actual)
    return [str(d) for d in compare_states(expected, actual)]


def test_identical_states_compare_equal() -> None:
    assert diff(lambda s: None) == []


def test_one_element_of_one_exp_avg() -> None:
    def change(s):  # type: ignore[no-untyped-def]
        s["optim/fc1.weight/exp_avg"][2, 1] += 1e-6

    (msg,) = diff(change)
    assert msg.startswith("optim/fc1.weight/exp_avg: values differ (torch.float32, shape (4, 3))")
    assert "1 of 12 elements; first at index (2, 1)" in msg


def test_step_counter_off_by_one() -> None:
    (msg,) = diff(lambda s: s["optim/fc1.weight/step"].add_(1))
    assert "optim/fc1.weight/step" in msg
    assert "expected 3.0, got 4.0" in msg


def test_dtype_change() -> None:
    def change(s):  # type: ignore[no-untyped-def]
        s["optim/fc1.weight/exp_avg_sq"] = s["optim/fc1.weight/exp_avg_sq"].double()

    (msg,) = diff(change)
    assert "dtype differs: expected torch.float32, shape (4, 3), got torch.float64, shape (4, 3)" in msg


def test_shape_change() -> None:
    (msg,) = diff(lambda s: s.update({"param/fc1.weight": s["param/fc1.weight"].reshape(3, 4)}))
    assert "shape differs" in msg


def test_missing_key() -> None:
    (msg,) = diff(lambda s: s.pop("optim/fc1.weight/exp_avg"))
    assert msg == "optim/fc1.weight/exp_avg: missing after load"


def test_extra_key() -> None:
    (msg,) = diff(lambda s: s.update({"optim/fc1.weight/max_exp_avg_sq": torch.zeros(1)}))
    assert msg.startswith("optim/fc1.weight/max_exp_avg_sq: unexpected key")


def test_param_group_lr_changed() -> None:
    (msg,) = diff(lambda s: s.update({"param_groups/0/lr": 0.02}))
    assert msg == "param_groups/0/lr: expected 0.01, got 0.02"


def test_prefix_on_key() -> None:
    msgs = diff(lambda s: s.update({"param/module.fc1.weight": s.pop("param/fc1.weight")}))
    assert "param/fc1.weight: missing after load" in msgs
    assert any(m.startswith("param/module.fc1.weight: unexpected key") for m in msgs)


def test_betas_tuple_to_list_is_type_drift() -> None:
    (msg,) = diff(lambda s: s.update({"param_groups/0/betas": [0.9, 0.99]}))
    assert "type drift: expected tuple (0.9, 0.99), got list [0.9, 0.99]" in msg


def test_float_int_drift() -> None:
    (msg,) = diff(lambda s: s.update({"param_groups/0/lr": 1}))
    assert "type drift" in msg


def test_tensor_versus_float_step() -> None:
    (msg,) = diff(lambda s: s.update({"optim/fc1.weight/step": 3.0}))
    assert "type differs: expected Tensor, got float" in msg


def test_bitwise_not_allclose() -> None:
    a = torch.tensor([1.0, 2.0])
    b = torch.nextafter(a, torch.tensor(10.0))
    assert torch.allclose(a, b)
    assert compare_tensors(a, b) is not None


def test_negative_zero_differs_and_equal_nans_agree() -> None:
    assert compare_tensors(torch.tensor([0.0]), torch.tensor([-0.0])) is not None
    nan = torch.tensor([float("nan"), 1.0])
    assert compare_tensors(nan, nan.clone()) is None
    assert compare_states({"lr": 0.0}, {"lr": -0.0}) != []


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.bool]
)
def test_every_dtype_compares(dtype: torch.dtype) -> None:
    a = (torch.arange(6) % 2).to(dtype)
    assert compare_tensors(a, a.clone()) is None
    b = a.clone()
    b[3] = 0 if dtype is not torch.bool else False
    b[4] = 1 if dtype is not torch.bool else True
    assert compare_tensors(a, b) is not None


def test_complex_tensors() -> None:
    a = torch.tensor([1 + 2j, 3 + 4j])
    b = a.clone()
    b[1] = 3 + 5j
    assert "first at index (1,)" in (compare_tensors(a, b) or "")


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    data=st.data(),
)
def test_any_single_element_change_is_found_at_its_index(shape: list[int], data: st.DataObject) -> None:
    a = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    flat = data.draw(st.integers(0, a.numel() - 1), label="flat index")
    b = a.clone()
    b.view(-1)[flat] = torch.nextafter(b.view(-1)[flat], torch.tensor(float("inf")))
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape))
    msg = compare_tensors(a, b)
    assert msg is not None
    assert f"first at index {idx}" in msg


def test_first_of_each_kind_puts_every_kind_up_front() -> None:
    from conformance.check.compare import first_of_each_kind

    expected = adam_state()
    actual = copy.deepcopy(expected)
    for key in [k for k in actual if k.startswith("optim/")]:
        actual.pop(key)
    actual["param/fc1.weight"] = actual["param/fc1.weight"] + 1
    kinds = [d.kind for d in first_of_each_kind(compare_states(expected, actual))][:2]
    assert sorted(kinds) == ["missing", "values"]


def test_a_load_that_leaves_a_stray_optimizer_key_is_a_named_difference() -> None:
    """Optimizer.load_state_dict keeps a saved state key it cannot map to a parameter (a name,
    say) as it is: the snapshot names it instead of crashing the harness on it."""
    from torch import nn

    from conformance.check.snapshot import local_state

    model = nn.Linear(2, 2)
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(1, 2)).sum().backward()
    optim.step()
    before = local_state(model, optim, None)
    saved = optim.state_dict()
    saved["state"] = {"experts.1.0.weight": saved["state"][0]}
    optim.load_state_dict(saved)
    diffs = compare_states(before, local_state(model, optim, None))
    assert any("<not a parameter: 'experts.1.0.weight'>" in str(d) for d in diffs), diffs

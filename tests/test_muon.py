"""Muon with AdamW, as it is used (conformance/optim/muon.py): one optimizer of two kinds of
groups (DeepSpeed's SingleDeviceMuonWithAuxAdam, muon_aux) and two optimizers (torch.optim.Muon
beside AdamW, muon_adamw). The harness gives Muon the plain model's weight matrices; the layouts and
APIs that cannot carry them say why (unsupported); the round trip passes with the built-in
strategies and catches a save that drops the `use_muon` flag and a load that drops AdamW's half."""

from __future__ import annotations

import dataclasses
import functools
import gc
import importlib
import importlib.util
from collections.abc import Callable, Iterator

import pytest
import torch

from conformance.case import Case
from conformance.layout.builtin import builtin_strategy
from conformance.matrix.rules import ONE_OPTIMIZER_API, unsupported_by_design
from conformance.optim import muon
from conformance.optim.registry import OPTIMIZERS
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.strategy.registry import ONE_OPTIMIZER_STRATEGY, RegisteredStrategy, Supports
from conformance.training import weight_matrices
from conformance.world import WorldPool
from tests import broken_muon

matrix_cells = importlib.import_module(
    "conformance.matrix.cells"
)  # the package exports a function of that name
NO_DEEPSPEED = importlib.util.find_spec("deepspeed") is None
AUX = Case("ddp", "replicate", "sd_full", "torch_save", "muon_aux", "mlp", 2)
AUX_FSDP2 = Case("fsdp2", "shard", "dsd_sharded", "dcp", "muon_aux", "mlp", 2)
TWO = Case("ddp", "replicate", "sd_full", "torch_save", "muon_adamw", "mlp", 2)
TWO_FSDP2 = Case("fsdp2", "shard", "dsd_sharded", "dcp", "muon_adamw", "mlp", 2)


def test_muon_gets_the_weight_matrices_and_adamw_the_rest() -> None:
    assert {n for n, m in weight_matrices("mlp").items() if m} == {"fc1.weight", "fc2.weight", "fc3.weight"}
    tied = weight_matrices("tied_transformer")
    assert tied["embed.weight"] is False  # an embedding (tied to the head) goes to AdamW
    assert not any(m for n, m in weight_matrices("llama").items() if "norm" in n or "tok_embeddings" in n)


def test_deepspeeds_muon_says_why_it_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "deepspeed" else real(name))
    assert "deepspeed is not installed" in (OPTIMIZERS["muon_aux"].unavailable() or "")
    assert OPTIMIZERS["muon_adamw"].unavailable() is None  # torch 2.13 has torch.optim.Muon


def test_the_two_optimizers_step_and_zero_together() -> None:
    model = torch.nn.Linear(3, 2)
    pair = muon._muon_and_adamw([{"params": [model.weight]}, {"params": [model.bias]}])
    model(torch.ones(1, 3)).sum().backward()
    pair.step()
    assert "momentum_buffer" in pair[0].state[model.weight] and "exp_avg" in pair[1].state[model.bias]
    pair.zero_grad()
    assert model.weight.grad is None and model.bias.grad is None


@pytest.mark.parametrize("optimizer", ["muon_aux", "muon_adamw"])
def test_fsdp1_refuses_muon_where_it_flattens(optimizer: str) -> None:
    flat = Case("fsdp1", "full_shard", "sd_full", "torch_save", optimizer, "mlp", 1)
    views = Case("fsdp1+orig", "full_shard", "sd_sharded", "torch_save_per_rank", optimizer, "mlp", 2)
    assert "one flat 1-D parameter per unit" in (unsupported_by_design(flat) or "")
    assert "1-D views of each rank's flat shard" in (unsupported_by_design(views) or "")
    # unsharded, the original parameters keep their shapes: no rule, the cell runs
    assert unsupported_by_design(dataclasses.replace(views, sharding="no_shard")) is None
    assert unsupported_by_design(dataclasses.replace(views, world_size=1)) is None


def test_two_optimizers_only_where_the_api_and_the_strategy_take_them() -> None:
    legacy = Case("fsdp1+orig", "no_shard", "legacy_full_shard", "torch_save", "muon_adamw", "mlp", 2)
    assert unsupported_by_design(legacy) == ONE_OPTIMIZER_API
    assert unsupported_by_design(dataclasses.replace(legacy, optimizer="muon_aux")) is None
    for api in ("sd_full", "dsd_full"):
        assert unsupported_by_design(dataclasses.replace(legacy, api=api)) is None, api
    owner = RegisteredStrategy("mine", builtin_strategy, Supports(wrappers=(("ddp", "replicate"),)))
    assert unsupported_by_design(TWO, owner) == ONE_OPTIMIZER_STRATEGY
    assert unsupported_by_design(AUX, owner) is None


def _clear_caches() -> None:
    for obj in gc.get_objects():
        if isinstance(obj, functools._lru_cache_wrapper) and getattr(obj, "__module__", "").startswith(
            "conformance"
        ):
            obj.cache_clear()


def test_late_values_leave_the_other_cells_of_a_covering(monkeypatch: pytest.MonkeyPatch) -> None:
    """Optimizer.covered_late: default's covering with the Muon values holds every cell it holds
    without them, the same ids, and adds the Muon cells alone."""
    _clear_caches()
    with_muon = {c.id for c in matrix_cells.covered("default", "resume")}
    for name in ("muon_aux", "muon_adamw"):
        monkeypatch.delitem(OPTIMIZERS, name)
    _clear_caches()
    try:
        without = {c.id for c in matrix_cells.covered("default", "resume")}
    finally:
        monkeypatch.undo()
        _clear_caches()
    assert without and {i for i in with_muon if "-muon_" not in i} == without
    assert any("-muon_aux" in i for i in with_muon) and any("-muon_adamw" in i for i in with_muon)


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


RUNS: list[tuple[Callable[[Case], object], Case, Outcome, list[str]]] = [
    (builtin_strategy, TWO, Outcome.PASS, []),
    (builtin_strategy, TWO_FSDP2, Outcome.PASS, []),
    (broken_muon.drops_adamw_half, TWO, Outcome.FAIL, ["optim/fc1.bias/exp_avg: missing after load"]),
    (broken_muon.drops_adamw_half, TWO_FSDP2, Outcome.FAIL, ["optim/fc1.bias/exp_avg: missing after load"]),
]
AUX_RUNS: list[tuple[Callable[[Case], object], Case, Outcome, list[str]]] = [
    (builtin_strategy, AUX, Outcome.PASS, []),
    (builtin_strategy, AUX_FSDP2, Outcome.PASS, []),
    (broken_muon.drops_use_muon, AUX, Outcome.FAIL, ["use_muon"]),
    # DCP loads in place into the fresh optimizer's groups, which have the flag: the load refuses
    (
        broken_muon.drops_use_muon,
        AUX_FSDP2,
        Outcome.ERROR,
        ["Missing key in checkpoint state_dict", "use_muon"],
    ),
]


def _run(
    pool: WorldPool, factory: Callable[[Case], object], case: Case, outcome: Outcome, needles: list[str]
) -> None:
    result = run_case(pool, case, backend="gloo", timeout_s=60, strategy_factory=factory)  # type: ignore[arg-type]
    assert result.outcome is outcome, result.detail
    assert result.outcome is not Outcome.PASS or "bitwise equal" in result.detail, result.detail
    for needle in needles:
        assert needle in result.detail, f"{needle!r} not in:\n{result.detail}"


@pytest.mark.parametrize(
    ("factory", "case", "outcome", "needles"), RUNS, ids=[f"{f.__name__}-{c.id}" for f, c, _, _ in RUNS]
)
def test_two_optimizers_round_trip(pool: WorldPool, factory, case, outcome, needles) -> None:  # type: ignore[no-untyped-def]
    _run(pool, factory, case, outcome, needles)


@pytest.mark.skipif(NO_DEEPSPEED, reason="deepspeed is not installed")
@pytest.mark.parametrize(
    ("factory", "case", "outcome", "needles"),
    AUX_RUNS,
    ids=[f"{f.__name__}-{c.id}" for f, c, _, _ in AUX_RUNS],
)
def test_one_optimizer_of_two_kinds_round_trip(pool: WorldPool, factory, case, outcome, needles) -> None:  # type: ignore[no-untyped-def]
    _run(pool, factory, case, outcome, needles)

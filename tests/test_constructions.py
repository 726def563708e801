"""How the fresh model is built is an axis of its own (conformance.construction): a model built on
the meta device gets storage and its own initialisation before the load, a construction that skips
the initialisation is caught by the round trip and the resume as a corrupted buffer
(tests/broken_constructions.py), a construction that did not build on the meta device is refused
as vacuous, and the constructor's cells of a covering profile are chosen as if no other
construction existed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from conformance.case import DEFAULT_CONSTRUCTION
from conformance.construction.base import Materialize, NotBuiltOnMeta
from conformance.construction.registry import construction_of
from tests.test_plugin import outcomes, run_cases

UNINITIALISED = (
    "ddp-dsd_sharded-dcp-adamw-mlp_nonpersistent-meta_uninit-w2",
    "fsdp2-dsd_sharded-dcp-adamw-mlp_nonpersistent-meta_uninit-w2",
    "resume-fsdp2-dsd_sharded-dcp-adamw+sched-mlp_nonpersistent-meta_uninit-w2",
)
INITIALISED = tuple(i.replace("meta_uninit", "meta") for i in UNINITIALISED)
# rank-0 init: FSDP2 broadcasts no buffer, so rank 1's uninitialised one stays (DDP's wrap would
# broadcast rank 0's); the full state broadcast from rank 0, and loaded on every rank
RANK0_UNINITIALISED = (
    "fsdp2-dsd_full_bcast-torch_save-adamw-mlp_nonpersistent-rank0init_uninit-w2",
    "fsdp2-dsd_full-dcp-adamw-mlp_nonpersistent-rank0init_uninit-w2",
)
RANK0_INITIALISED = tuple(i.replace("rank0init_uninit", "rank0init") for i in RANK0_UNINITIALISED)


def test_a_construction_that_skips_the_initialisation_is_caught(tmp_path: Path) -> None:
    code, results, log = run_cases(
        tmp_path,
        "-p",
        "tests.broken_constructions",
        "--matrix",
        "ci-product",
        "-k",
        " or ".join(UNINITIALISED + INITIALISED),
    )
    got = outcomes(results)
    assert {i: got.get(i) for i in INITIALISED} == dict.fromkeys(INITIALISED, "pass"), log[-3000:]
    assert {i: got.get(i) for i in UNINITIALISED} == dict.fromkeys(UNINITIALISED, "fail"), log[-3000:]
    details = {c["id"]: c["detail"] for c in results["cells"]}
    assert all("buffer/scale" in details[i] for i in UNINITIALISED), details
    assert code == 1


def test_a_rank0_init_that_skips_the_other_ranks_initialisation_is_caught(tmp_path: Path) -> None:
    """FSDP2 loads a full state only through get/set_state_dict, whose betas tuple comes back a
    list (the dsd-full-betas-list finding): the control's only differences are that drift, and the
    broken value's are that drift and rank 1's buffer."""
    code, results, log = run_cases(
        tmp_path,
        "-p",
        "tests.broken_constructions",
        "--matrix",
        "default-product",
        "-k",
        " or ".join(RANK0_UNINITIALISED + RANK0_INITIALISED),
    )
    details = {c["id"]: c["detail"] for c in results.get("cells", ())}
    assert set(details) == {*RANK0_UNINITIALISED, *RANK0_INITIALISED}, log[-3000:]
    drift = "param_groups/0/betas: type drift: expected tuple (0.9, 0.99), got list [0.9, 0.99]"
    for control in RANK0_INITIALISED:
        assert _differences(details[control]) == {drift}, details[control]
    for broken in RANK0_UNINITIALISED:
        assert _differences(details[broken]) >= {drift}, details[broken]
        assert "rank 1 local state: buffer/scale: values differ" in details[broken], details[broken]
        assert "rank 0 local state: buffer/" not in details[broken], details[broken]
    assert code == 1


def _differences(detail: str) -> set[str]:
    """Each difference of a FAIL's detail, without the state it was found in."""
    return {line.split(": ", 1)[1] for line in detail.splitlines()[1:] if ": " in line}


class OffMeta(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("made_here", torch.zeros(3, device="cpu"))


def test_a_model_that_is_not_on_the_meta_device_is_refused() -> None:
    meta = construction_of("meta")
    with pytest.raises(NotBuiltOnMeta):
        meta.build(OffMeta, lambda m: m, torch.device("cpu"), Materialize.AFTER_WRAP)


def test_the_meta_construction_gives_storage_and_initialises() -> None:
    from conformance.models import model_class

    cls = model_class("mlp_nonpersistent")
    built = construction_of("meta").build(cls, lambda m: m, torch.device("cpu"), Materialize.BEFORE_WRAP)
    assert not any(t.is_meta for t in (*built.parameters(), *built.buffers()))
    assert torch.equal(built.scale, cls().scale)
    tied = construction_of("meta").build(
        model_class("tied_transformer"), lambda m: m, torch.device("cpu"), Materialize.BEFORE_WRAP
    )
    assert tied.head.weight is tied.embed.weight


def test_a_rank0_init_builds_by_the_constructor_on_rank_0_only() -> None:
    from conformance.construction.base import on_meta
    from conformance.models import model_class

    rank0 = construction_of("rank0init")
    cls = model_class("mlp_nonpersistent")
    wrapped_on_meta: dict[int, bool] = {}

    def wrap_at(rank: int) -> Callable[[nn.Module], nn.Module]:
        def wrap(model: nn.Module) -> nn.Module:
            wrapped_on_meta[rank] = on_meta(model)
            return model

        return wrap

    for rank in (0, 1):
        built = rank0.build(cls, wrap_at(rank), torch.device("cpu"), Materialize.AFTER_WRAP, rank=rank)
        assert not any(t.is_meta for t in (*built.parameters(), *built.buffers()))
        assert torch.equal(built.scale, cls().scale)
    assert wrapped_on_meta == {0: False, 1: True}  # rank 1 wraps a meta model: no values of its own

    def on_the_meta_device() -> nn.Module:
        with torch.device("meta"):
            return cls()

    with pytest.raises(NotBuiltOnMeta):  # rank 0 on the meta device would be the meta construction
        rank0.build(on_the_meta_device, lambda m: m, torch.device("cpu"), Materialize.AFTER_WRAP, rank=0)


def test_the_constructors_cells_of_a_covering_ignore_other_constructions() -> None:
    from conformance.matrix.cells import cells

    for check in ("roundtrip", "resume"):
        chosen = cells("default", check)
        meta = [c for c in chosen if c.construction != DEFAULT_CONSTRUCTION]
        assert meta, check
        # no constructor cell is missing because a meta cell met its pairs: every constructor
        # (row, feature) answer of the default declaration keeps its preset, and meta cells
        # never answer a constructor's column
        from conformance.check.registry import CHECKS

        for c in meta:
            from conformance.check.construction_cells import (
                built_on_meta,
                built_on_rank0,
                built_on_rank0_uninitialised,
            )

            own = (built_on_meta, built_on_rank0, built_on_rank0_uninitialised)
            assert not any(f.selects(c.axes()) for f in CHECKS[check].features if f.selects not in own), c.id

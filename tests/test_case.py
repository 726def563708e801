"""The case record and the matrix: readable stable ids, kinds as words, unsupported reasons."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch

from conformance.case import Case
from conformance.layout.registry import layout_of
from conformance.matrix import PROFILES, cases, unsupported_reason


def test_id_reads_as_the_axes() -> None:
    case = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 2)
    assert case.id == "fsdp2-dsd_sharded-dcp-adamw-mlp-w2"
    fsdp1 = Case("fsdp1", "full_shard", "sd_local", "torch_save_per_rank", "adamw", "mlp", 4, "bf16")
    assert fsdp1.id == "fsdp1_full_shard-sd_local-torch_save_per_rank-adamw-mlp-bf16-w4"
    orig = Case("fsdp1+orig", "shard_grad_op", "sd_full", "torch_save", "adamw+sched", "mlp", 2)
    assert orig.id == "fsdp1_shard_grad_op+orig-sd_full-torch_save-adamw+sched-mlp-w2"
    hsdp = Case("fsdp2+noreshard", "hsdp", "dsd_sharded", "dcp", "sgd", "mlp", 4)
    assert hsdp.id == "fsdp2_hsdp+noreshard-dsd_sharded-dcp-sgd-mlp-w4"
    assert hsdp.family == "fsdp2" and hsdp.axes()["family"] == "fsdp2"


def test_case_is_frozen_picklable_and_hashable() -> None:
    case = Case("ddp", "replicate", "sd_full", "torch_save", "adamw", "mlp", 1)
    assert pickle.loads(pickle.dumps(case)) == case
    assert len({case, pickle.loads(pickle.dumps(case))}) == 1
    with pytest.raises(AttributeError):
        case.world_size = 2  # type: ignore[misc]


def test_bad_axes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown state-dict API 'sd_bogus'"):
        Case("ddp", "replicate", "sd_bogus", "torch_save", "adamw", "mlp", 1)
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        Case("ddp", "replicate", "sd_full", "torch_save", "adamw", "mlp", 0)
    with pytest.raises(ValueError, match="unknown matrix profile"):
        cases("huge")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_matrix_ids_unique_sorted_and_stable(profile: str) -> None:
    first, second = cases(profile), cases(profile)
    ids = [c.id for c in first]
    assert ids == [c.id for c in second] == sorted(ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_sharded_word_selects_exactly_the_sharded_cells(profile: str) -> None:
    for case in cases(profile):
        assert ("sharded" in case.id) == (case.kind == "sharded"), case.id
        assert case.kind in case.id


def test_every_cell_carries_all_axes() -> None:
    for case in cases("full"):
        axes = case.axes()
        assert set(axes) >= {
            "wrapper",
            "sharding",
            "api",
            "storage",
            "optimizer",
            "model",
            "precision",
            "world_size",
            "kind",
        }


def test_unsupported_cells_are_declared_with_reasons() -> None:
    sharded_one_file = Case("fsdp2", "shard", "dsd_sharded", "torch_save", "adamw", "mlp", 2)
    assert "only this rank's part" in (unsupported_reason(sharded_one_file) or "")
    assert unsupported_reason(Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 2)) is None
    hybrid_w1 = Case("fsdp1", "hybrid_shard", "sd_full", "torch_save", "adamw", "mlp", 1)
    assert "at least 2 ranks" in (unsupported_reason(hybrid_w1) or "")
    assert unsupported_reason(dataclasses.replace(hybrid_w1, world_size=2, mesh="1x2")) is None
    assert (
        unsupported_reason(Case("fsdp1", "hybrid_shard", "sd_full", "torch_save", "adamw", "mlp", 4)) is None
    )
    groups = Case("fsdp1", "full_shard", "sd_full", "torch_save", "adamw+groups", "mlp", 2)
    assert "flat parameter" in (unsupported_reason(groups) or "")
    assert (
        unsupported_reason(
            Case("fsdp1+orig", "full_shard", "sd_full", "torch_save", "adamw+groups", "mlp", 2)
        )
        is None
    )


def test_default_profile_is_big_enough_and_covers_every_axis_value() -> None:
    from conformance.case import API_KINDS
    from conformance.matrix import ALL_WRAPPERS, OPTIMIZERS, STORAGES
    from conformance.optim.registry import SCHEDULERS
    from conformance.precision.registry import PRECISIONS

    default = cases("default")
    assert len(default) >= 400
    runnable = [c for c in default if unsupported_reason(c) is None]
    assert len(runnable) == len(default)  # a covering enumerates no unsupported cell
    from conformance.check.slices import EP_WRAPPERS, LAYOUT_WRAPPERS, PP_FSDP_WRAPPERS

    layouts = set(LAYOUT_WRAPPERS) | set(EP_WRAPPERS) | set(PP_FSDP_WRAPPERS)
    full = {(c.wrapper, c.sharding) for c in cases("full") if unsupported_reason(c) is None}
    assert set(ALL_WRAPPERS) | layouts <= {(c.wrapper, c.sharding) for c in runnable} == full
    assert {c.api for c in runnable} == set(API_KINDS)
    assert {c.storage for c in runnable} == set(STORAGES)
    every = {name: set(values) for name, values in (("optimizer_impl", ("", "foreach", "fused")),)}
    assert {c.axes()["base_optimizer"] for c in runnable} == set(OPTIMIZERS)
    assert {c.axes()["optimizer_impl"] for c in runnable} == every["optimizer_impl"]
    assert {c.axes()["param_groups"] for c in runnable} == {"", "groups"}
    assert {c.axes()["scheduler"] for c in runnable} == {"", *SCHEDULERS}
    assert {c.precision for c in runnable} == set(PRECISIONS)


def test_seed_recipes_are_rows_of_the_default_declaration_and_their_triples_run() -> None:
    """The documented recipes are cells the default declaration spells out; the covering runs
    each one's (layout, API, storage) on some cell."""
    ids = {c.id for c in cases("default-product")}
    triples = {(c.wrapper, c.sharding, c.api, c.storage) for c in cases("default")}
    for recipe in [c for c in cases("default-product") if c.id in RECIPES]:
        assert (recipe.wrapper, recipe.sharding, recipe.api, recipe.storage) in triples, recipe.id
    assert "fsdp1_full_shard-legacy_full_scatter-torch_save-adamw-mlp-w2" in ids  # tutorial, scatter
    assert "fsdp1_full_shard-legacy_full_rank0_init-torch_save-adamw-mlp-w2" in ids  # tutorial, rank-0 load
    assert "fsdp1_full_shard-sd_sharded-torch_save_per_rank-adamw-mlp-w2" in ids  # per-rank sharded files
    assert "fsdp1_full_shard-sd_sharded-torch_save_per_rank-adamw-moe-w4" in ids  # MoE experts on sub-groups
    assert ids >= RECIPES


RECIPES = {
    "fsdp1_full_shard-legacy_full_scatter-torch_save-adamw-mlp-w2",
    "fsdp1_full_shard-legacy_full_rank0_init-torch_save-adamw-mlp-w2",
    "fsdp1_full_shard-sd_sharded-torch_save_per_rank-adamw-mlp-w2",
    "fsdp1_full_shard-sd_sharded-torch_save_per_rank-adamw-moe-w4",
}


def test_expert_parallel_layout() -> None:
    from conformance.models import build_model
    from conformance.strategy.wrappers import expert_ranks

    assert expert_ranks(4, 2) == [[0, 2], [1, 3]]
    assert expert_ranks(2, 2) == [[0], [1]]
    rank0, rank1, rank2 = (build_model("moe", 7, rank, 4) for rank in range(3))
    assert list(dict(rank0.named_parameters())) == list(dict(rank1.named_parameters()))  # same names
    assert not torch.equal(rank0.experts["0"][0].weight, rank1.experts["0"][0].weight)  # other expert
    assert torch.equal(rank0.experts["0"][0].weight, rank2.experts["0"][0].weight)  # same expert
    assert torch.equal(rank0.inp.weight, rank1.inp.weight)  # dense layers: identical everywhere
    moe = Case("fsdp1", "full_shard", "sd_full", "torch_save", "adamw", "moe", 2)
    assert "rank 0's expert only" in (unsupported_reason(moe) or "")
    assert "at least 2 ranks" in (
        unsupported_reason(Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "moe", 1)) or ""
    )


def test_gpu_only_recipe_is_an_environment_skip_on_gloo() -> None:
    from conformance.runner import environment_skip

    case = Case("fsdp1", "full_shard", "legacy_full_rank0_init", "torch_save", "adamw", "mlp", 2)
    assert "sync_module_states=True refuses CPU modules" in (environment_skip(case, "gloo") or "")


def test_hsdp_has_every_mesh_a_world_holds_and_ids_name_all_but_the_default() -> None:
    hsdp = [
        c for c in cases("full") if c.sharding == "hsdp" and c.api == "dsd_sharded" and c.storage == "dcp"
    ]
    meshes = {(c.world_size, c.mesh) for c in hsdp if c.optimizer == "adamw" and c.model == "mlp"}
    assert meshes == {(1, ""), (2, "2x1"), (2, "1x2"), (4, ""), (4, "1x4"), (4, "4x1")}
    by_id = {c.id: c for c in hsdp}

    def mesh_of(cell_id: str) -> tuple[int, ...]:
        return layout_of(by_id[cell_id]).mesh_shape(by_id[cell_id])

    assert mesh_of("fsdp2_hsdp-dsd_sharded-dcp-adamw-mlp-w4") == (2, 2)
    assert mesh_of("fsdp2_hsdp-dsd_sharded-dcp-adamw-mlp-w4-mesh1x4") == (1, 4)
    assert mesh_of("fsdp2_hsdp-dsd_sharded-dcp-adamw-mlp-w2-mesh2x1") == (2, 1)

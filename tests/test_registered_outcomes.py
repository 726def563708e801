"""What a registered strategy's cells say is the strategy's, and what they say it is: a load
that leaves DTensors on the saving world's mesh is its FAIL (kind `mesh`, impact corrupts),
never the harness's error; a refusal its storage declares (OwnFormat.reshard_refusals) is a
refused pass, and the same load undeclared its error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.case import Transfer
from conformance.check.registry import CHECKS
from conformance.matrix import refusal_reason
from conformance.observed import IMPACT_OF_KIND
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.strategy.registry import RegisteredStrategy
from conformance.world import WorldPool
from tests import registered_variants as variants


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


def reshard(strategy: RegisteredStrategy, save: int, load: int) -> Transfer:
    cells = CHECKS["reshard"].strategy_cells("default", strategy)
    return next(
        c
        for c in cells
        if isinstance(c, Transfer)
        and not strategy.unsupported_reason(c)
        and c.save.world_size == save
        and c.load.world_size == load
        and c.save.model == "mlp"
        and c.save.optimizer == "adamw"
    )


@pytest.mark.parametrize(("save", "load"), [(2, 1), (1, 2), (2, 4)])
def test_state_left_on_the_saving_world_s_mesh_is_the_strategy_s_fail(
    pool: WorldPool, save: int, load: int
) -> None:
    cell = reshard(variants.FOREIGN_MESH, save, load)
    result = run_case(pool, cell, backend="gloo", timeout_s=120, registered=variants.FOREIGN_MESH)
    assert result.outcome is Outcome.FAIL, f"{cell.id}:\n{result.detail}"
    meshes = [o for o in result.observed if o["kind"] == "mesh"]
    assert meshes, result.detail
    assert all(o["key"].startswith("optim/") for o in meshes), meshes
    assert "foreign mesh" in result.detail and "not a mesh of this" in result.detail, result.detail
    assert IMPACT_OF_KIND["mesh"] == "corrupts"


def test_the_same_strategy_at_its_own_world_size_passes(pool: WorldPool) -> None:
    cell = next(
        c
        for c in CHECKS["roundtrip"].strategy_cells("default", variants.FOREIGN_MESH)
        if not variants.FOREIGN_MESH.unsupported_reason(c)
        and c.world_size == 2
        and c.model == "mlp"
        and c.optimizer == "adamw"
    )
    result = run_case(pool, cell, backend="gloo", timeout_s=120, registered=variants.FOREIGN_MESH)
    assert result.outcome is Outcome.PASS, result.detail


def test_a_declared_refusal_is_a_refused_pass_and_undeclared_an_error(pool: WorldPool) -> None:
    cell = reshard(variants.REFUSES_TO_RESHARD, 2, 1)
    assert refusal_reason(cell, variants.REFUSES_TO_RESHARD.storage) == variants.REFUSAL[1]
    assert refusal_reason(cell, variants.UNDECLARED.storage) is None
    declared = run_case(pool, cell, backend="gloo", timeout_s=120, registered=variants.REFUSES_TO_RESHARD)
    assert declared.outcome is Outcome.PASS, declared.detail
    assert "cannot reshard" in declared.detail, declared.detail
    undeclared = run_case(pool, cell, backend="gloo", timeout_s=120, registered=variants.UNDECLARED)
    assert undeclared.outcome is Outcome.ERROR, undeclared.detail


def test_a_damage_declared_without_its_files_is_refused_at_registration() -> None:
    """missing_shard needs rank_file, missing_metadata needs metadata: declared without them,
    their cells could only be the harness's errors; the OwnFormat refuses, naming the field."""
    from conformance.strategy.storage.own import OwnFormat

    with pytest.raises(ValueError, match="rank_file"):
        OwnFormat("mine", damage=("missing_shard",))
    with pytest.raises(ValueError, match="metadata"):
        OwnFormat("mine", damage=("missing_metadata",), rank_file="r{rank}")
    assert OwnFormat("mine", damage=("missing_shard",), rank_file="r{rank}.pt").rank_file
    # globs match bare file names: a path can never match, and is refused at registration
    with pytest.raises(ValueError, match=r"data='shards/\*\.pt' names a path.*'\*\.pt'"):
        OwnFormat("mine", data="shards/*.pt")
    with pytest.raises(ValueError, match=r"rank_file='r/\{rank\}\.pt' names a path"):
        OwnFormat("mine", damage=("missing_shard",), rank_file="r/{rank}.pt")
    with pytest.raises(ValueError, match=r"metadata='meta/index\.json' names a path"):
        OwnFormat("mine", damage=("missing_metadata",), metadata=("meta/index.json",))
    with pytest.raises(ValueError, match=r"has no \{rank\}"):
        OwnFormat("mine", damage=("missing_shard",), rank_file="shard.pt")


def test_a_missing_shard_of_files_that_hold_nothing_is_unsupported(tmp_path: Path) -> None:
    """Deleting a rank's files that hold no byte (replicated state written by the lowest rank, as
    OLMo-core's DCP writer does) damages nothing: a pass or a fail there would be vacuous."""
    from conformance.check.corrupt import DamageDoesNotApply, damage
    from conformance.strategy.storage.own import OwnFormat

    storage = OwnFormat("lowest_rank_dcp", damage=("missing_shard",), rank_file="__{rank}_*.distcp")
    (tmp_path / "__0_0.distcp").write_bytes(b"tensor bytes")
    (tmp_path / "__1_0.distcp").write_bytes(b"")
    with pytest.raises(DamageDoesNotApply, match="hold no byte"):
        damage(tmp_path, "missing_shard", storage, 2)
    assert (tmp_path / "__1_0.distcp").exists()
    (tmp_path / "__1_0.distcp").write_bytes(b"rank 1's part")
    assert damage(tmp_path, "missing_shard", storage, 2) == "deleted __1_0.distcp"


def test_a_missing_shard_of_a_rank_that_wrote_no_file_is_unsupported(tmp_path: Path) -> None:
    """A rank that wrote no file at all (Megatron's torch_dist under DDP: every tensor's main
    replica on rank 0) has nothing to delete: unsupported, never a harness error; a storage whose
    names match none of its files at all is still the storage's wrong declaration."""
    from conformance.check.corrupt import DamageDoesNotApply, damage
    from conformance.strategy.storage.own import OwnFormat

    storage = OwnFormat("lowest_rank_dcp", damage=("missing_shard",), rank_file="__{rank}_*.distcp")
    (tmp_path / "__0_0.distcp").write_bytes(b"tensor bytes")
    (tmp_path / ".metadata").write_bytes(b"index")
    with pytest.raises(DamageDoesNotApply, match="rank 1 wrote no file"):
        damage(tmp_path, "missing_shard", storage, 2)
    wrong = OwnFormat("wrong_names", damage=("missing_shard",), rank_file="shard-{rank}.pt")
    with pytest.raises(FileNotFoundError, match="names no file for missing_shard"):
        damage(tmp_path, "missing_shard", wrong, 2)

"""The parallel layouts (tensor parallel, 2-D meshes, pipeline stages alone and with FSDP
inside, prefixing wrappers):
the built-in strategy passes, and a broken one per layout is caught by the check meant for it:
a TP weight silently replicated (sanity), a pipeline stage's keys dropped (round trip), a
wrapper prefix leaked into a full checkpoint (hygiene)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from conformance.case import Case, Transfer
from conformance.layout.builtin import builtin_strategy
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken_layouts

FSDP2_TP = Case("fsdp2", "tp", "dsd_sharded", "dcp", "adamw", "llama", 2, mesh="1x2")
TP = Case("tp", "tp", "dsd_sharded", "dcp", "adamw", "llama", 2)
MOE_FSDP2 = Case("fsdp2", "shard", "dsd_sharded", "torch_save_per_rank", "adamw", "moe", 4)
MOE_FSDP1 = Case("fsdp1", "full_shard", "sd_sharded", "torch_save_per_rank", "adamw", "moe", 4)
EP = Case("fsdp2", "ep", "dsd_sharded", "dcp", "adamw", "moe_dtensor", 2, mesh="1x2")
PP = Case("pp", "stages", "dsd_sharded_flat", "torch_save_per_rank", "adamw", "llama", 2)
PP_FSDP = Case("pp", "fsdp", "dsd_sharded_flat", "dcp", "adamw", "llama", 4, mesh="2x2")
PP_INTERLEAVED = Case("pp", "interleaved", "dsd_sharded_flat", "torch_save_per_rank", "adamw", "llama", 2)
AC_FULL = Case("fsdp2+ac", "shard", "dsd_full", "torch_save", "sgd", "llama", 2)
COMPILED_FULL = Case("fsdp2+compile", "shard", "dsd_full", "torch_save", "sgd", "llama", 2)
PP_TO_ONE = Transfer(
    "relayout",
    dataclasses.replace(PP, storage="dcp", check="relayout"),
    dataclasses.replace(PP, storage="dcp", check="relayout", world_size=1),
)
TWO_D_TO_FSDP = Transfer(
    "relayout",
    dataclasses.replace(FSDP2_TP, check="relayout"),
    Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "llama", 2, check="relayout"),
)


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


CONTROLS = [
    FSDP2_TP,
    EP,
    TP,
    PP,
    PP_FSDP,
    PP_INTERLEAVED,
    dataclasses.replace(AC_FULL, check="hygiene"),
    dataclasses.replace(COMPILED_FULL, check="hygiene"),
    PP_TO_ONE,
    TWO_D_TO_FSDP,
    MOE_FSDP2,
    MOE_FSDP1,
]


@pytest.mark.parametrize("cell", CONTROLS, ids=lambda c: c.id)
def test_control_builtin_strategy_passes(pool: WorldPool, cell: Case | Transfer) -> None:
    result = run_case(pool, cell, backend="gloo", timeout_s=120, strategy_factory=builtin_strategy)
    assert result.outcome is Outcome.PASS, result.detail


BROKEN: list[tuple[Callable[[Case], object], Case, list[str]]] = [
    (
        broken_layouts.tp_replicates,
        FSDP2_TP,
        ["sanity: rank 0: layers.0.attention.", "is not a shard over mesh dim 'tp'"],
    ),
    (  # FSDP1 alone where FSDP1 over TP was asked: its flat parameters record no TP spec
        broken_layouts.fsdp1_skips_tp,
        Case("fsdp1+orig", "tp", "sd_full", "torch_save", "adamw", "mlp", 4, mesh="2x2"),
        ["sanity: rank 0: fc1.weight is not a shard over mesh dim 'tp'"],
    ),
    (
        broken_layouts.tp_ignored,
        TP,
        ["sanity: every rank holds all", "is not a shard over mesh dim 'tp'"],
    ),
    (  # experts left whole on every rank, FSDP-sharded like the rest
        broken_layouts.tp_replicates,
        EP,
        ["sanity: rank 0: experts.w1 is not a shard over mesh dim 'ep'", "expert parallelism shards it"],
    ),
    (  # each rank's own expert sharded over the world as one tensor: the experts' sanity rule
        broken_layouts.shards_experts_over_the_world,
        MOE_FSDP2,
        [
            "sanity: rank 0: experts.0.0.bias (expert 0) is spread over ranks [0, 1, 2, 3], which hold experts [0, 1]"
        ],
    ),
    (
        broken_layouts.shards_experts_over_the_world,
        MOE_FSDP1,
        ["sanity: rank 0: experts.0 (expert 0) is spread over ranks [0, 1, 2, 3], which hold experts [0, 1]"],
    ),
    (
        broken_layouts.drops_last_stage,
        PP,
        ["full state: param/layers.1.", "values differ", "rank 1 local state: param/"],
    ),
    (  # the last stage's whole tensors live on ranks 2 and 3 only: the gathered state has them
        broken_layouts.drops_last_stage,
        dataclasses.replace(PP_FSDP, storage="torch_save_per_rank"),  # DCP refuses half a DTensor
        ["full state: param/layers.1.", "values differ", "rank 3 local state: param/"],
    ),
    (  # two stages per rank: rank 0's second (layers.1), rank 1's second (norm, output) not saved
        broken_layouts.saves_first_part_only,
        PP_INTERLEAVED,
        ["full state: param/layers.1.", "values differ", "param/output.weight"],
    ),
    (
        broken_layouts.leaks_wrapper_prefix,
        dataclasses.replace(AC_FULL, check="hygiene"),
        ["keys carry a wrapper prefix", "_checkpoint_wrapped_module"],
    ),
    (
        broken_layouts.leaks_wrapper_prefix,
        dataclasses.replace(COMPILED_FULL, check="hygiene"),
        ["keys carry a wrapper prefix", "_orig_mod"],
    ),
]


@pytest.mark.parametrize(
    ("factory", "cell", "needles"), BROKEN, ids=[f"{f.__name__}-{c.id}" for f, c, _ in BROKEN]
)
def test_broken_layout_strategy_is_caught(
    pool: WorldPool, factory: Callable[[Case], object], cell: Case, needles: list[str]
) -> None:
    result = run_case(pool, cell, backend="gloo", timeout_s=120, strategy_factory=factory)  # type: ignore[arg-type]
    assert result.outcome is Outcome.FAIL, result.detail
    for needle in needles:
        assert needle in result.detail, f"{needle!r} not in:\n{result.detail}"


def test_a_generated_tensor_parallel_plan_reads_back_and_refuses_a_broken_one() -> None:
    from conformance.generated import ModelSpec, generated_model

    spec = ModelSpec((5, 8, 3, 2), (True, False, True), (False, True, False), tp=("c", "r", "n"))
    assert spec.name == "gen_5x8x3x2_b101_w010_tpcrn" and ModelSpec.parse(spec.name) == spec
    assert sorted(generated_model(spec.name).tp_plan()) == ["layers.0", "layers.1"]
    for plan in (("c", "n", "r"), ("r", "c", "n"), ("c", "c", "r")):
        with pytest.raises(ValueError, match="column-wise"):
            ModelSpec((5, 8, 3, 2), (True,) * 3, (False,) * 3, tp=plan)


def test_the_tensor_parallel_properties_draw_a_mesh_and_a_plan_that_splits_over_it() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from conformance.generated import tp_model_specs
    from conformance.property import properties

    props = {p.id: p for p in properties("full") if p.tp_layouts}
    assert "property-roundtrip-fsdp2_tp-dsd_sharded-dcp-w2" in props
    assert props["property-roundtrip-fsdp2_tp-dsd_sharded-dcp-w2"].tp_layouts == (("1x2", 2), ("2x1", 1))
    assert not [p for p in properties("default") if p.tp_layouts]  # the full profile's only

    @settings(max_examples=30, deadline=None)
    @given(st.integers(1, 4).flatmap(lambda d: st.tuples(st.just(d), tp_model_specs(d))))
    def plans(drawn: tuple[int, object]) -> None:
        degree, spec = drawn
        first = spec.tp.index("c")  # type: ignore[attr-defined]
        assert spec.tp[first + 1] == "r" and spec.dims[first + 1] % degree == 0  # type: ignore[attr-defined]

    plans()


def test_a_registered_strategy_claims_a_layout_like_a_built_in_wrapper() -> None:
    """Supports.wrappers takes the layouts' pairs: a strategy claiming FSDP2 + TP gets the 2-D
    cells of every mesh, with the layout's models, and nothing of the layouts it does not claim."""
    from conformance.matrix import strategy_cells
    from conformance.strategy.registry import RegisteredStrategy, Supports

    claims = RegisteredStrategy(
        "mine", builtin_strategy, Supports(wrappers=(("fsdp2", "tp"),)), storage="dcp"
    )
    cells = [
        c for c in strategy_cells(claims, "default-product", "roundtrip") if not claims.unsupported_reason(c)
    ]
    assert {(c.wrapper, c.sharding) for c in cells} == {("fsdp2", "tp")}
    assert {c.mesh for c in cells} == {"1x2", "2x1", "1x4", "2x2", "4x1"}
    assert {c.model for c in cells} == {"llama", "llama_fused", "mlp_scalar"}
    assert "mine-fsdp2_tp-sharded-dcp-adamw-llama-w4-mesh2x2" in {c.id for c in cells}


def test_the_llama_plan_is_torchtitan_s_with_sequence_parallel_norms_the_sanity_check_spares() -> None:
    """Every norm is SequenceParallel (its weight a replica on "tp", by design), so the sanity
    check asks a shard of the column- and row-wise weights only."""
    from torch.distributed.tensor.parallel import SequenceParallel

    from conformance.check.sanity import parallel_params
    from conformance.lm import TinyLlama

    plan = TinyLlama.tp_plan()
    norms = {m for m in plan if m.endswith("norm")}
    assert norms == {
        "norm",
        "layers.0.attention_norm",
        "layers.0.ffn_norm",
        "layers.1.attention_norm",
        "layers.1.ffn_norm",
    }
    assert all(isinstance(plan[m], SequenceParallel) for m in norms)
    dim, sharded = parallel_params(TP)
    assert dim == "tp" and "tok_embeddings.weight" in sharded and "output.weight" in sharded
    assert not {f"{m}.weight" for m in norms} & set(sharded)
    assert not {m for m in sharded if m.endswith(("attention.weight", "feed_forward.weight"))}

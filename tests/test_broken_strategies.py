"""Every check can fail: each deliberately broken strategy is caught, by the check meant for it.

The same cells pass with the built-in strategy (the control), so what is caught is the
breakage, not the cell.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from conformance.case import Case, Transfer
from conformance.layout.builtin import builtin_strategy
from conformance.outcome import Outcome
from conformance.runner import run_case
from conformance.world import WorldPool
from tests import broken

FSDP2_SHARDED = Case("fsdp2", "shard", "dsd_sharded", "torch_save_per_rank", "adamw", "mlp", 2)
FSDP1_SHARDED = Case("fsdp1", "full_shard", "sd_sharded", "torch_save_per_rank", "adamw", "mlp", 2)
FSDP1_LOCAL = Case("fsdp1", "full_shard", "sd_local", "torch_save_per_rank", "adamw", "mlp", 2)
FSDP1_FULL = Case("fsdp1", "full_shard", "sd_full", "torch_save", "adamw", "mlp", 2)
DDP = Case("ddp", "replicate", "sd_full", "torch_save", "adamw", "mlp", 2)
BN_PER_RANK = Case("fsdp2", "shard", "dsd_sharded", "torch_save_per_rank", "adamw", "bn_frozen", 2)
BN_DCP = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "bn_frozen", 2)
BN_ONE_FILE = Case("fsdp1", "full_shard", "sd_full", "torch_save", "adam", "bn_frozen", 2)
TIED = Case("fsdp1+orig", "full_shard", "sd_sharded", "torch_save_per_rank", "sgd", "tied_transformer", 2)
FSDP2_SCHED = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw+sched", "mlp", 2)


@pytest.fixture(scope="module")
def pool() -> Iterator[WorldPool]:
    with WorldPool() as pool:
        yield pool


@pytest.mark.parametrize(
    "case",
    [
        FSDP2_SHARDED,
        FSDP1_SHARDED,
        FSDP1_LOCAL,
        FSDP1_FULL,
        DDP,
        FSDP2_SCHED,
        BN_PER_RANK,
        BN_DCP,
        BN_ONE_FILE,
        TIED,
    ],
    ids=lambda c: c.id,
)
def test_control_builtin_strategy_passes(pool: WorldPool, case: Case) -> None:
    result = run_case(pool, case, backend="gloo", timeout_s=60, strategy_factory=builtin_strategy)
    assert result.outcome is Outcome.PASS, result.detail
    assert "bitwise equal" in result.detail


def test_control_preloading_strategy_passes(pool: WorldPool) -> None:
    """load_before_wrap: the harness sets its checked fresh model aside without calling the
    preloaded one vacuous, and compares the model that was loaded before wrapping."""
    result = run_case(
        pool, FSDP1_FULL, backend="gloo", timeout_s=60, strategy_factory=broken.preloads_on_every_rank
    )
    assert result.outcome is Outcome.PASS, result.detail


BROKEN: list[tuple[Callable[[Case], object], Case, Outcome, list[str]]] = [
    (
        broken.no_op_load,
        FSDP2_SHARDED,
        Outcome.FAIL,
        ["full state: param/fc1.bias: values differ", "missing after load"],
    ),
    (
        broken.forgets_optimizer,
        FSDP1_FULL,
        Outcome.FAIL,
        ["optim/fc1._flat_param/exp_avg: missing after load"],
    ),
    (broken.forgets_optimizer, DDP, Outcome.FAIL, ["optim/fc1.weight/exp_avg: missing after load"]),
    (
        broken.resets_step,
        FSDP2_SHARDED,
        Outcome.FAIL,
        ["optim/fc1.weight/step: values differ", "got 0.0"],
    ),
    (
        broken.doubles_lr,
        FSDP1_SHARDED,
        Outcome.FAIL,
        ["param_groups/0/lr: expected 0.01, got 0.02"],
    ),
    (broken.casts_exp_avg, DDP, Outcome.FAIL, ["exp_avg: dtype differs: expected torch.float32"]),
    (
        broken.nudges_one_element,
        FSDP2_SHARDED,
        Outcome.FAIL,
        ["rank 1 local state: param/", "1 of"],
    ),
    (broken.nudges_one_element, FSDP1_SHARDED, Outcome.FAIL, ["full state: param/", "1 of"]),
    (broken.save_mutates_live_state, FSDP1_FULL, Outcome.FAIL, ["save changed the live state"]),
    # torch itself refuses another rank's shard, loudly; the error text is the cell's detail.
    # (A shard that loads silently with wrong values is nudges_one_element's case.)
    (
        broken.only_rank_zero_shard,
        FSDP1_LOCAL,
        Outcome.ERROR,
        ["Local rank at save time was 0, but at load time was 1"],
    ),
    # Uneven DTensor shards: FSDP2 refuses rank 0's shard on rank 1, loudly.
    (
        broken.only_rank_zero_shard,
        FSDP2_SHARDED,
        Outcome.ERROR,
        ["rank 1 raised RuntimeError first", "size of tensor a"],
    ),
    (
        broken.returns_trained_model,
        DDP,
        Outcome.ERROR,
        ["VacuousCheckError", "returned the trained model"],
    ),
    (
        broken.silently_replicates,
        FSDP1_FULL,
        Outcome.FAIL,
        ["sanity: every rank holds all 551 of the model's parameter elements", "silently replicated"],
    ),
    (
        broken.replicas_stop_syncing,
        DDP,
        Outcome.FAIL,
        ["sanity: rank 1's parameter #0 differs from replica rank 0's"],
    ),
    (broken.drops_scheduler, FSDP2_SCHED, Outcome.FAIL, ["scheduler/last_epoch: expected 3, got 0"]),
    (
        broken.resets_running_stats,
        BN_PER_RANK,
        Outcome.FAIL,
        ["rank 1 local state: buffer/bn.num_batches_tracked"],
    ),
    (broken.resets_running_stats, BN_DCP, Outcome.FAIL, ["full state: buffer/bn.num_batches_tracked"]),
    (broken.resets_running_stats, BN_ONE_FILE, Outcome.FAIL, ["full state: buffer/bn.num_batches_tracked"]),
    (
        broken.preloads_on_rank_zero_only,
        FSDP1_FULL,
        Outcome.FAIL,
        ["full state: param/fc1._flat_param: values differ", "rank 1 local state: param/"],
    ),
]


@pytest.mark.parametrize(
    ("factory", "case", "outcome", "needles"),
    BROKEN,
    ids=[f"{f.__name__}-{c.id}" for f, c, _, _ in BROKEN],
)
def test_broken_strategy_is_caught(
    pool: WorldPool,
    factory: Callable[[Case], object],
    case: Case,
    outcome: Outcome,
    needles: list[str],
) -> None:
    result = run_case(pool, case, backend="gloo", timeout_s=60, strategy_factory=factory)  # type: ignore[arg-type]
    assert result.outcome is outcome, result.detail
    for needle in needles:
        assert needle in result.detail, f"{needle!r} not in:\n{result.detail}"


def _check(case: Case, check: str, variant: str = "") -> Case:
    return dataclasses.replace(case, check=check, variant=variant)


DDP_SCHED = Case("ddp", "replicate", "sd_full", "torch_save", "adamw+sched", "mlp", 2)
# SGD: DSD full state dicts turn AdamW's betas tuple into a list (a finding of its own)
FSDP2_FULL = Case("fsdp2", "shard", "dsd_full", "torch_save", "sgd", "mlp", 2)
FSDP1_FULL_SGD = dataclasses.replace(FSDP1_FULL, optimizer="sgd")

# (factory, the cell of the check that must catch it, its outcome, needles in the detail,
#  a round-trip cell the same broken strategy passes: only this check catches it)
ONLY_THIS_CHECK: list[tuple[Callable[[Case], object], object, Outcome, list[str], Case]] = [
    (
        broken.leaves_stale_gradients,
        _check(DDP_SCHED, "resume"),
        Outcome.FAIL,
        ["rank 0 step 4: loss", "after the resume", "rank 1 step 4: loss"],
        DDP_SCHED,
    ),
    (
        broken.drops_optimizer_on_reshard,
        Transfer("reshard", DDP, dataclasses.replace(DDP, world_size=1)),
        Outcome.FAIL,
        ["optim/fc1.weight/exp_avg: missing after load", "loaded by ddp-sd_full-torch_save in 1"],
        DDP,
    ),
    (
        broken.negates_weights_under_fsdp2,
        Transfer("interop", FSDP2_FULL, FSDP1_FULL_SGD),
        Outcome.FAIL,
        ["param/fc1.weight: values differ", "loaded by fsdp1_full_shard-sd_full-torch_save"],
        FSDP2_FULL,
    ),
    (
        broken.saves_ddp_prefix,
        _check(DDP, "hygiene"),
        Outcome.FAIL,
        ["keys carry a wrapper prefix", "module.fc1.bias", "strict load into the plain model"],
        DDP,
    ),
    (
        broken.swallows_load_errors,
        _check(DDP, "corrupt", "truncated"),
        Outcome.FAIL,
        ["loaded a damaged checkpoint without an error (cut checkpoint.pt", "values differ"],
        DDP,
    ),
]


@pytest.mark.parametrize(
    ("factory", "cell", "outcome", "needles", "control"),
    ONLY_THIS_CHECK,
    ids=[f"{f.__name__}-{c.id}" for f, c, _, _, _ in ONLY_THIS_CHECK],  # type: ignore[attr-defined]
)
def test_only_its_check_catches_it(
    pool: WorldPool,
    factory: Callable[[Case], object],
    cell: Case | Transfer,
    outcome: Outcome,
    needles: list[str],
    control: Case,
) -> None:
    passed = run_case(pool, control, backend="gloo", timeout_s=60, strategy_factory=factory)  # type: ignore[arg-type]
    assert passed.outcome is Outcome.PASS, f"the round trip should not catch it:\n{passed.detail}"
    result = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=factory)  # type: ignore[arg-type]
    assert result.outcome is outcome, result.detail
    for needle in needles:
        assert needle in result.detail, f"{needle!r} not in:\n{result.detail}"


DDP_PER_RANK = Case("ddp", "replicate", "sd_full", "torch_save_per_rank", "adamw", "mlp", 1)
GROW = Transfer("reshard", DDP_PER_RANK, dataclasses.replace(DDP_PER_RANK, world_size=2))


def test_a_refusal_passes_only_when_the_load_raises(pool: WorldPool) -> None:
    """Per-rank files into a bigger world must refuse. A strategy that skips the missing file
    leaves rank 1 with fresh weights; rank 0's canonical state alone would not show it."""
    refused = run_case(pool, GROW, backend="gloo", timeout_s=60, strategy_factory=builtin_strategy)
    assert refused.outcome is Outcome.PASS and refused.detail.startswith("refused, as it must"), (
        refused.detail
    )
    assert "FileNotFoundError" in refused.detail
    # rank 0 returned from its load and waits in the harness's check after it: not the strategy's
    assert "(rank 0 in the harness's own code; waiting in a collective?)" in refused.detail
    swallowed = run_case(
        pool, GROW, backend="gloo", timeout_s=60, strategy_factory=broken.swallows_load_errors
    )
    assert swallowed.outcome is Outcome.FAIL, swallowed.detail
    assert "after the load, sanity: rank 1's parameter #0 differs from replica rank 0's" in swallowed.detail


def test_a_harness_fault_after_the_load_never_passes_a_corrupt_cell(pool: WorldPool) -> None:
    """The corrupt check passes only when the strategy's load raised: here the load swallows
    its error and the harness's own read of the model raises afterwards (as the harness's
    full_tensor() did on torch 2.11). That is the suite's fault, reported as such."""
    cell = _check(DDP, "corrupt", "truncated")
    result = run_case(
        pool, cell, backend="gloo", timeout_s=60, strategy_factory=broken.load_leaves_harness_unable_to_read
    )
    assert result.outcome is Outcome.HARNESS_ERROR, result.detail
    assert "the harness raised" in result.detail
    assert "RuntimeError first in the harness's own code" in result.detail
    control = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS, control.detail
    assert "the load raised, as it must" in control.detail
    assert "first in strategy.load" in control.detail


def test_empty_model_checkpoint_fails_hygiene_loudly(pool: WorldPool) -> None:
    result = run_case(
        pool,
        _check(DDP, "hygiene"),
        backend="gloo",
        timeout_s=60,
        strategy_factory=broken.saves_no_model_tensors,
    )
    assert result.outcome is Outcome.FAIL, result.detail
    assert "the checkpoint holds no model tensors at all" in result.detail


@pytest.mark.parametrize(
    "cell",
    [
        _check(DDP_SCHED, "resume"),
        Transfer("reshard", DDP, dataclasses.replace(DDP, world_size=1)),
        Transfer("interop", FSDP2_FULL, FSDP1_FULL_SGD),
        _check(DDP, "hygiene"),
    ],
    ids=lambda c: c.id,
)
def test_control_builtin_strategy_passes_each_check(pool: WorldPool, cell: Case | Transfer) -> None:
    result = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=builtin_strategy)
    assert result.outcome is Outcome.PASS, result.detail


def test_hygiene_catches_a_saved_non_persistent_buffer(pool: WorldPool) -> None:
    cell = _check(dataclasses.replace(DDP, model="mlp_nonpersistent"), "hygiene")
    control = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS, control.detail
    result = run_case(
        pool, cell, backend="gloo", timeout_s=60, strategy_factory=broken.saves_non_persistent_buffer
    )
    assert result.outcome is Outcome.FAIL, result.detail
    assert "non-persistent buffers saved: ['scale']" in result.detail


def test_hygiene_reads_with_weights_only(pool: WorldPool) -> None:
    """A checkpoint that only torch.load(weights_only=False) reads is not consumable."""
    result = run_case(
        pool, _check(DDP, "hygiene"), backend="gloo", timeout_s=60, strategy_factory=broken.saves_an_object
    )
    assert result.outcome is Outcome.ERROR, result.detail
    assert "in strategy.read_model_state" in result.detail and "weights_only" in result.detail


def test_an_async_save_that_stages_after_the_step_is_caught(pool: WorldPool) -> None:
    """dcp_async_busy's promise, the state at the call and not the step in flight, can fail."""
    cell = dataclasses.replace(DDP, api="dsd_sharded", storage="dcp_async_busy")
    control = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=builtin_strategy)
    assert control.outcome is Outcome.PASS, control.detail
    result = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=broken.stages_after_the_step)
    assert result.outcome is Outcome.FAIL, result.detail
    assert "values differ" in result.detail


def test_a_refusal_on_one_rank_that_leaves_its_peers_waiting_is_a_hang(pool: WorldPool) -> None:
    """A load must end on every rank for its refusal to pass: rank 0 raising while rank 1 waits
    in a collective is what a user's run does until the process group's timeout. The same
    refusal on every rank still passes (the control)."""
    cell = _check(DDP, "corrupt", "truncated")
    result = run_case(
        pool, cell, backend="gloo", timeout_s=60, strategy_factory=broken.refuses_on_rank_zero_only
    )
    assert result.outcome is Outcome.HANG, result.detail
    assert "strategy.load raised on one rank and left ranks [1] waiting inside" in result.detail
    assert "seen on rank 0 only" in result.detail
    hung = [o for o in result.records if o.kind == "hang"]
    assert [(o.scope, o.message) for o in hung] == [
        (
            "load phase",
            "ranks [1] never ended strategy.load after a rank raised in it (rank 1 in strategy.load)",
        )
    ]
    control = run_case(
        pool, cell, backend="gloo", timeout_s=60, strategy_factory=broken.load_raises_key_error
    )
    assert control.outcome is Outcome.PASS, control.detail
    assert control.detail.startswith("the load raised, as it must"), control.detail


def test_a_rank_slower_than_the_grace_that_ends_the_load_is_no_hang(pool: WorldPool) -> None:
    """Rank 1 is still inside the load when the grace after rank 0's refusal ends, but it was
    slow, not waiting on rank 0: it leaves the load after the others let go of the group. Every
    rank ended the load, so the refusal passes (a loaded machine must not turn it into a hang)."""
    cell = _check(DDP, "corrupt", "truncated")
    slow = broken.refuses_on_rank_zero_while_rank_one_is_slow
    result = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=slow)
    assert result.outcome is Outcome.PASS, result.detail
    # it left the load (then its harness collective with rank 0, which had let go, fails: when
    # that reaches the world before it looks again depends on the machine's load)
    assert "ranks [1] then ended the call: slow, not waiting on the others" in result.detail, result.detail


def test_a_wait_whose_trace_is_lost_is_the_harness_s_fault(pool: WorldPool) -> None:
    """Where a waiting rank's trace cannot be read, whether it waits in the code under test is
    not known: neither a refusal that passes nor the strategy's hang, but a harness-error."""
    cell = _check(DDP, "corrupt", "truncated")
    result = run_case(
        pool, cell, backend="gloo", timeout_s=60, strategy_factory=broken.loses_its_trace_on_rank_one
    )
    assert result.outcome is Outcome.HARNESS_ERROR, result.detail
    assert "where it waits is not known" in result.detail
    assert "rank 1 in an unknown place" in result.detail
    # the same when the trace is lost between the end of the grace and the look after the release
    late = broken.loses_its_trace_after_the_release
    result = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=late)
    assert result.outcome is Outcome.HARNESS_ERROR, result.detail
    assert "where it waits is not known" in result.detail


def test_the_hygiene_read_runs_as_a_program_of_one_process(pool: WorldPool) -> None:
    """read_model_state runs with torch.distributed not initialised, as an inference user's
    program reads a checkpoint: a reader that refuses inside a process group passes; the 1-rank
    world then serves the next cell with a fresh group."""
    cell = _check(DDP, "hygiene")
    reader = broken.reads_outside_a_process_group_only
    result = run_case(pool, cell, backend="gloo", timeout_s=60, strategy_factory=reader)
    assert result.outcome is Outcome.PASS, result.detail
    one_rank = dataclasses.replace(DDP, world_size=1)
    after = run_case(pool, one_rank, backend="gloo", timeout_s=60, strategy_factory=builtin_strategy)
    assert after.outcome is Outcome.PASS, after.detail


def test_a_rank_that_dies_names_the_call_it_died_in(pool: WorldPool) -> None:
    """A rank's os._exit inside the strategy's load: the crash's first line says where."""
    result = run_case(pool, DDP, backend="gloo", timeout_s=60, strategy_factory=broken.exits_in_load)
    assert result.outcome is Outcome.CRASH, result.detail
    assert result.detail.startswith("rank 1 exited with code 1 (in strategy.load)"), result.detail

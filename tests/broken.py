"""Deliberately broken strategies, each reproducing a failure mode seen in real frameworks.

Each is the built-in strategy with one thing done wrong, so the check that must catch it is
the only thing that differs. Factories are module-level functions: cells pickle them by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from conformance.case import Case
from conformance.layout.builtin import builtin_strategy
from conformance.strategy.protocol import Strategy, TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.wrappers import Fsdp1Wrapper, unwrap
from conformance.world import RankContext


@dataclass
class Delegating:
    """The built-in strategy for the case; subclasses break one step."""

    base: Strategy

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return self.base.wrap(model, ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.base.save(state, path, ctx)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.base.load(state, path, ctx)

    def read_model_state(self, path: Path) -> dict:
        return self.base.read_model_state(path)  # type: ignore[attr-defined]


class NoOpLoad(Delegating):
    """Loading does nothing: the fresh model and optimizer stay as built."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        pass


class ForgetsOptimizer(Delegating):
    """Only the model comes back: the optimizer is left fresh (state dropped)."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        state.optim.state.clear()


class ResetsStep(Delegating):
    """The step counter restarts at zero after a resume."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        for entry in state.optim.state.values():
            entry["step"] = torch.zeros_like(entry["step"])


class DoublesLr(Delegating):
    """A param_group hyperparameter is not restored as saved."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        for group in state.optim.param_groups:
            group["lr"] = group["lr"] * 2


class CastsExpAvg(Delegating):
    """Optimizer state comes back in another dtype (a bf16 checkpoint of fp32 state)."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        for entry in state.optim.state.values():
            entry["exp_avg"] = entry["exp_avg"].to(torch.bfloat16)


class NudgesOneElement(Delegating):
    """One element of one parameter is off by one ulp after the load (only bitwise sees it)."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        if ctx.rank == ctx.world_size - 1:
            with torch.no_grad():
                param = next(p for p in state.model.parameters() if p.numel() > 0)
                local = param.to_local() if hasattr(param, "to_local") else param
                flat = local.view(-1)
                flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf")))


class SaveMutatesLiveState(Delegating):
    """Saving zeroes the live optimizer state (e.g. an in-place offload that frees buffers)."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.save(state, path, ctx)
        for entry in state.optim.state.values():
            entry["exp_avg"].zero_()


class OnlyRankZeroShard(Delegating):
    """Every rank loads rank 0's per-rank file: the other ranks' shards are lost."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        if ctx.rank != 0:
            own, zero = path / f"rank{ctx.rank}.pt", path / "rank0.pt"
            torch.distributed.barrier()
            own.write_bytes(zero.read_bytes())
        else:
            torch.distributed.barrier()
        self.base.load(state, path, ctx)


class ReturnsTrainedModel(Delegating):
    """wrap() hands back the first model it wrapped: the 'fresh' model is the trained one."""

    def wrap(self, model, ctx):  # type: ignore[no-untyped-def]
        if not hasattr(self, "first"):
            self.first = self.base.wrap(model, ctx)
        return self.first


class SilentlyReplicates(Delegating):
    """Asked for FULL_SHARD, wraps with NO_SHARD: every rank holds the whole model."""

    def wrap(self, model, ctx):  # type: ignore[no-untyped-def]
        return Fsdp1Wrapper("no_shard").wrap(model, ctx)


class ReplicasStopSyncing(Delegating):
    """Asked for DDP, leaves the model unwrapped: ranks train apart on their own batches."""

    def wrap(self, model, ctx):  # type: ignore[no-untyped-def]
        return model.to(ctx.device)


class DropsScheduler(Delegating):
    """Saves model and optimizer, but the LR scheduler's state is not restored."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        scheduler, state.scheduler = state.scheduler, None
        try:
            self.base.load(state, path, ctx)
        finally:
            state.scheduler = scheduler


class ResetsRunningStats(Delegating):
    """Buffers are not restored: BatchNorm running stats start over after a resume."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        for module in state.model.modules():
            if isinstance(module, nn.BatchNorm1d):
                module.reset_running_stats()


class PreloadsOnRankZeroOnly(Delegating):
    """The FSDP tutorial's resume without sync_module_states=True: rank 0 loads the full model
    into the unwrapped module before wrapping, nobody broadcasts it, and the load itself only
    restores the optimizer; the other ranks keep their fresh shards. (Built on FSDP1 full.)"""

    every_rank = False

    def load_before_wrap(self, model, path, ctx):  # type: ignore[no-untyped-def]
        if self.every_rank or ctx.rank == 0:
            model.load_state_dict(torch.load(path / "checkpoint.pt", weights_only=False)["model"])

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType

        saved = torch.load(path / "checkpoint.pt", weights_only=False)
        with FSDP.state_dict_type(state.model, StateDictType.FULL_STATE_DICT):
            osd = FSDP.optim_state_dict_to_load(state.model, state.optim, saved["optim"])
        state.optim.load_state_dict(osd)


class PreloadsOnEveryRank(PreloadsOnRankZeroOnly):
    """The control: every rank loads the full model before wrapping (no broadcast needed)."""

    every_rank = True


class LeavesStaleGradients(Delegating):
    """Materializes optimizer state with a dummy backward before loading and never clears the
    gradients: the state compares equal, but the first step after a resume adds stale grads."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        for param in state.model.parameters():
            param.grad = torch.ones_like(param)


class DropsOptimizerOnReshard(Delegating):
    """When the world size changed since the save, loads the model only and starts the
    optimizer afresh (as trainers do that "cannot reshard optimizer state"), silently."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.save(state, path, ctx)
        if ctx.rank == 0:
            (path / "world_size").write_text(str(ctx.world_size))

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        if int((path / "world_size").read_text()) == ctx.world_size:
            self.base.load(state, path, ctx)
            return
        loaded = torch.load(path / "checkpoint.pt", weights_only=False)
        unwrap(state.model).load_state_dict(loaded["model"])


def _negate(model_state: dict) -> dict:
    return {k: -v if torch.is_floating_point(v) else v for k, v in model_state.items()}


class NegatesOwnWeights(Delegating):
    """A private layout: weights are saved negated and negated back by its own load. Its own
    round trip holds; any other loader gets the wrong sign."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        base = self.base
        out = base._state_dict(state)  # type: ignore[attr-defined]
        out["model"] = _negate(out["model"])
        base.storage.save(out, path, ctx)  # type: ignore[attr-defined]

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        base = self.base
        loaded = base.storage.load(path, ctx, lambda: base._state_dict(state))  # type: ignore[attr-defined]
        loaded["model"] = _negate(loaded["model"])
        base.api.set(state.model, state.optim, loaded)  # type: ignore[attr-defined]


class SavesDdpPrefix(Delegating):
    """Saves ddp_model.state_dict() (keys "module.fc1.weight") and loads it back the same way:
    its own round trip holds, the plain model cannot load the file."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        out = {"model": state.model.state_dict(), "optim": state.optim.state_dict()}
        self.base.storage.save(out, path, ctx)  # type: ignore[attr-defined]

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        loaded = self.base.storage.load(path, ctx, dict)  # type: ignore[attr-defined]
        state.model.load_state_dict(loaded["model"])
        state.optim.load_state_dict(loaded["optim"])


class SavesNoModelTensors(Delegating):
    """The model part of the checkpoint is empty (a state dict taken outside the FSDP context:
    the bug a major framework's FSDP strategy shipped)."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        out = self.base._state_dict(state)  # type: ignore[attr-defined]
        out["model"] = {}
        self.base.storage.save(out, path, ctx)  # type: ignore[attr-defined]


class SwallowsLoadErrors(Delegating):
    """An unreadable checkpoint is skipped without a word: training "resumes" from scratch.
    (BaseException: DCP's CheckpointException is not an Exception.)"""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        with contextlib.suppress(BaseException):
            self.base.load(state, path, ctx)


class LoadLeavesHarnessUnableToRead(SwallowsLoadErrors):
    """The load "succeeds" (errors swallowed) and leaves a model the harness cannot read, as
    a DTensor whose mesh names a process group that no longer exists made the harness's
    full_tensor() raise after a load (torch 2.11, a warm world). The harness's exception
    must never pass a corrupt cell as "the load raised"."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        super().load(state, path, ctx)

        def unreadable(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise RuntimeError("Could not resolve the process group registered under the name 7")

        state.model.parameters = unreadable  # the harness's next read of the model raises


def _factory(cls: type[Delegating], name: str):  # type: ignore[no-untyped-def]
    """A module-level factory Case -> Strategy, picklable by its name in this module."""

    def make(case: Case) -> Strategy:
        return cls(builtin_strategy(case))

    make.__name__ = make.__qualname__ = name
    return make


no_op_load = _factory(NoOpLoad, "no_op_load")
forgets_optimizer = _factory(ForgetsOptimizer, "forgets_optimizer")
resets_step = _factory(ResetsStep, "resets_step")
doubles_lr = _factory(DoublesLr, "doubles_lr")
casts_exp_avg = _factory(CastsExpAvg, "casts_exp_avg")
nudges_one_element = _factory(NudgesOneElement, "nudges_one_element")
save_mutates_live_state = _factory(SaveMutatesLiveState, "save_mutates_live_state")
only_rank_zero_shard = _factory(OnlyRankZeroShard, "only_rank_zero_shard")
returns_trained_model = _factory(ReturnsTrainedModel, "returns_trained_model")
silently_replicates = _factory(SilentlyReplicates, "silently_replicates")
replicas_stop_syncing = _factory(ReplicasStopSyncing, "replicas_stop_syncing")
drops_scheduler = _factory(DropsScheduler, "drops_scheduler")
resets_running_stats = _factory(ResetsRunningStats, "resets_running_stats")
preloads_on_rank_zero_only = _factory(PreloadsOnRankZeroOnly, "preloads_on_rank_zero_only")
preloads_on_every_rank = _factory(PreloadsOnEveryRank, "preloads_on_every_rank")
leaves_stale_gradients = _factory(LeavesStaleGradients, "leaves_stale_gradients")
drops_optimizer_on_reshard = _factory(DropsOptimizerOnReshard, "drops_optimizer_on_reshard")
saves_ddp_prefix = _factory(SavesDdpPrefix, "saves_ddp_prefix")
saves_no_model_tensors = _factory(SavesNoModelTensors, "saves_no_model_tensors")
load_leaves_harness_unable_to_read = _factory(
    LoadLeavesHarnessUnableToRead, "load_leaves_harness_unable_to_read"
)
swallows_load_errors = _factory(SwallowsLoadErrors, "swallows_load_errors")


def negates_weights_under_fsdp2(case: Case) -> Strategy:
    """NegatesOwnWeights for FSDP2 cells, the built-in strategy for every other."""
    strategy = builtin_strategy(case)
    return NegatesOwnWeights(strategy) if case.family == "fsdp2" else strategy


# Registered strategies (what `--strategy tests.broken:NAME` takes): a framework that says it
# shards but falls back to replication, and one that drops the optimizer state. Their cells
# of FSDP1 FULL_SHARD must fail; the control registers the built-in strategy the same way.
def _builtin_for(case: Case) -> Strategy:
    """The built-in strategy a registered cell stands for: DSD + DCP of the cell's kind."""
    api = "dsd_sharded" if case.kind == "sharded" else "dsd_full"
    return builtin_strategy(dataclasses.replace(case, api=api, storage="dcp", strategy=""))


def registered_control(case: Case) -> Strategy:
    return _builtin_for(case)


def registered_replicates(case: Case) -> Strategy:
    return SilentlyReplicates(_builtin_for(case))


def registered_forgets_optimizer(case: Case) -> Strategy:
    return ForgetsOptimizer(_builtin_for(case))


_FSDP1_SHARDED = Supports(wrappers=(("fsdp1+orig", "full_shard"),), kinds=("sharded",), checks=("roundtrip",))
CONTROL = RegisteredStrategy("control", registered_control, _FSDP1_SHARDED, storage="dcp")
FALLS_BACK_TO_REPLICATION = RegisteredStrategy(
    "replicates", registered_replicates, _FSDP1_SHARDED, storage="dcp"
)
DROPS_OPTIMIZER = RegisteredStrategy("forgets", registered_forgets_optimizer, _FSDP1_SHARDED, storage="dcp")
NEEDS_MISSING_FRAMEWORK = RegisteredStrategy(
    "absent", registered_control, _FSDP1_SHARDED, storage="dcp", requires=("no-such-framework-xyz",)
)
NOT_A_STRATEGY = object()


class CrashesOnSave(Delegating):
    """Rank 0 dies by SIGSEGV in save, as FSDP1's offload_to_cpu full state dict does."""

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        if ctx.rank == 0:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)
        self.base.save(state, path, ctx)


def registered_crashes_with_adam(case: Case) -> Strategy:
    """The control, except that its Adam cells crash in save."""
    strategy = _builtin_for(case)
    return CrashesOnSave(strategy) if case.optimizer == "adam" else strategy


CRASHES_WITH_ADAM = RegisteredStrategy("crashes", registered_crashes_with_adam, _FSDP1_SHARDED, storage="dcp")


class LosesOddRows(Delegating):
    """A shape-dependent bug, for the properties: after loading, every parameter whose first
    dimension is odd and above 1 is zeroed (as a framework that mishandles uneven shards
    might). No fixed model of the matrix has such a parameter... the generated ones do."""

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        import torch

        self.base.load(state, path, ctx)
        with torch.no_grad():
            for param in state.model.parameters():
                if param.dim() >= 1 and param.shape[0] > 1 and param.shape[0] % 2 == 1:
                    param.zero_()


loses_odd_rows = _factory(LosesOddRows, "loses_odd_rows")


# A registered strategy of every check (DSD + DCP under FSDP2, the built-in code), and one
# broken the way each check must catch, registered as a user registers theirs.
class SkipsLoadOnOtherWorldSize(Delegating):
    """Loads only into the world size it saved in; elsewhere it starts afresh, silently."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.save(state, path, ctx)
        if ctx.rank == 0:
            (path / "world_size").write_text(str(ctx.world_size))

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        if int((path / "world_size").read_text()) == ctx.world_size:
            self.base.load(state, path, ctx)


def _layout(model: nn.Module) -> str:
    """How the parameters are placed (their DTensor placements): FSDP alone and a 2-D mesh differ."""
    return repr([(n, str(getattr(p, "placements", ""))) for n, p in model.named_parameters()])


class SkipsLoadInOtherLayout(Delegating):
    """Loads only into the parallel layout it saved in; elsewhere it starts afresh, silently."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.save(state, path, ctx)
        if ctx.rank == 0:
            (path / "layout").write_text(_layout(state.model))

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        if (path / "layout").read_text() == _layout(state.model):
            self.base.load(state, path, ctx)


def _prefixed(out: dict) -> dict:
    return {**out, "model": {f"module.{k}": v for k, v in out["model"].items()}}


class PrefixesModelKeys(Delegating):
    """Saves its model keys as "module.<name>" and strips them again on load: its own loads
    hold, and the plain model cannot load what it wrote."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.storage.save(_prefixed(self.base._state_dict(state)), path, ctx)  # type: ignore[attr-defined]

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        base = self.base
        loaded = base.storage.load(path, ctx, lambda: _prefixed(base._state_dict(state)))  # type: ignore[attr-defined]
        loaded["model"] = {k.removeprefix("module."): v for k, v in loaded["model"].items()}
        base.api.set(state.model, state.optim, loaded)  # type: ignore[attr-defined]

    def read_model_state(self, path: Path) -> dict:
        return self.base.storage.read(path)["model"]  # type: ignore[attr-defined]


def _registered(cls: type[Delegating] | None, name: str):  # type: ignore[no-untyped-def]
    def make(case: Case) -> Strategy:
        return cls(_builtin_for(case)) if cls else _builtin_for(case)

    make.__name__ = make.__qualname__ = name
    return make


every_check_control = _registered(None, "every_check_control")
every_check_no_op_load = _registered(NoOpLoad, "every_check_no_op_load")
every_check_stale_gradients = _registered(LeavesStaleGradients, "every_check_stale_gradients")
every_check_skips_other_sizes = _registered(SkipsLoadOnOtherWorldSize, "every_check_skips_other_sizes")
every_check_skips_other_layouts = _registered(SkipsLoadInOtherLayout, "every_check_skips_other_layouts")
every_check_negates = _registered(NegatesOwnWeights, "every_check_negates")
every_check_prefixes = _registered(PrefixesModelKeys, "every_check_prefixes")
every_check_swallows = _registered(SwallowsLoadErrors, "every_check_swallows")

EVERY_CHECK = Supports(
    wrappers=(("fsdp2", "shard"), ("fsdp2", "tp")),
    kinds=("full", "sharded"),
    checks=("corrupt", "hygiene", "interop", "relayout", "reshard", "resume", "roundtrip"),
)


class SavesNonPersistentBuffer(Delegating):
    """Puts the model's non-persistent buffer (`scale` of mlp_nonpersistent) into the saved
    model state, as a hand-rolled named_buffers() dump would."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        out = self.base._state_dict(state)  # type: ignore[attr-defined]
        out["model"] = {**out["model"], "scale": unwrap(state.model).scale}
        self.base.storage.save(out, path, ctx)  # type: ignore[attr-defined]


class Opaque:
    """Not a type torch.load(weights_only=True) allows."""


class SavesAnObject(Delegating):
    """Saves a Python object beside the state: only torch.load(weights_only=False) reads it."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        out = self.base._state_dict(state)  # type: ignore[attr-defined]
        out["extra"] = Opaque()
        self.base.storage.save(out, path, ctx)  # type: ignore[attr-defined]


saves_non_persistent_buffer = _factory(SavesNonPersistentBuffer, "saves_non_persistent_buffer")
saves_an_object = _factory(SavesAnObject, "saves_an_object")


@dataclasses.dataclass(frozen=True)
class StagesAfterTheStep:
    """dcp_async_busy's save with staging that comes too late: the training step in flight
    lands in the checkpoint (what a stager that does not copy, or copies after returning, does).
    The round trip must see the step's values where the state at the call belongs."""

    name: str = "dcp_async_busy"

    def save(self, state: dict, path: Path, ctx: RankContext) -> None:
        import torch.distributed.checkpoint as dcp

        from conformance.strategy.storage.dcp_async import tensors_in

        live = tensors_in(state)
        with torch.no_grad():
            kept = [t.clone() for t in live]
            for tensor in live:
                tensor.add_(1.0)
            dcp.async_save(state, checkpoint_id=str(path)).result()  # staged only now: after the step
            for tensor, value in zip(live, kept, strict=True):
                tensor.copy_(value)

    def __getattr__(self, attr: str) -> object:  # everything else as dcp_async_busy does it
        from conformance.strategy.storage import STORAGES

        return getattr(STORAGES["dcp_async_busy"], attr)


def stages_after_the_step(case: Case) -> object:
    """The built-in strategy of the cell with its storage staging too late."""
    return dataclasses.replace(builtin_strategy(case), storage=StagesAfterTheStep())


# For the gate per difference (issue 25) and the impact classes of the tables.


class ZeroesMoments(Delegating):
    """AdamW's moments zeroed after the load: a second, real difference on top of whatever the
    cell already shows (the betas drift of get/set_state_dict full)."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        for entry in state.optim.state.values():
            for name in ("exp_avg", "exp_avg_sq"):
                entry[name].zero_()


class LoadRaisesKeyError(Delegating):
    """The load refuses, loudly: a KeyError from the strategy's own code."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        raise KeyError("fc1.weight")


class LoadRaisesValueError(Delegating):
    """The same refusal with another exception: a changed known error."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        raise ValueError("the checkpoint is of another format")


class HangsOnLoad(Delegating):
    """Every rank waits forever in the load."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        import time

        time.sleep(3600)


class RefusesOnRankZeroOnly(Delegating):
    """The load raises on rank 0 alone; every other rank goes on into a collective that rank 0
    never joins, and waits there (a library that checks its files on one rank)."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        import torch.distributed as dist

        if ctx.rank == 0:
            raise RuntimeError("the checkpoint is damaged (seen on rank 0 only)")
        dist.barrier()


class RefusesOnRankZeroWhileRankOneIsSlow(Delegating):
    """Not broken: rank 0 refuses at once; rank 1 loads its own part without a collective and
    takes longer than the world's grace (a slow disk): every rank ends the load, so the refusal
    passes; rank 1 was slow, not waiting on rank 0."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        import time

        if ctx.rank == 0:
            raise RuntimeError("the checkpoint is damaged (seen on rank 0 first)")
        time.sleep(4.0)


class LosesItsTraceOnRankOne(RefusesOnRankZeroOnly):
    """Rank 0 refuses alone as above; rank 1's trace of its calls under test can no longer be
    written or read (a full disk, here a directory where its file was) while it waits: the
    world cannot tell where it waits, and must say so rather than blame either side."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        from conformance.world.attribution import trace_path

        if ctx.rank == 1:
            trace = trace_path(ctx.cell_dir, ctx.rank)
            trace.unlink()
            trace.mkdir()
        super().load(state, path, ctx)


class LosesItsTraceAfterTheRelease(Delegating):
    """Rank 0 refuses at once; rank 1 stays in its load (no collective), its trace fine when the
    world's grace ends, then unreadable (a directory where its file was) before the world looks
    again after the release: where it waits is not known then either."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        import time

        from conformance.world.attribution import trace_path

        if ctx.rank == 0:
            raise RuntimeError("the checkpoint is damaged (seen on rank 0 first)")
        time.sleep(4.5)  # past the 3 s grace, inside the 3 s release wait
        trace = trace_path(ctx.cell_dir, ctx.rank)
        trace.unlink()
        trace.mkdir()
        time.sleep(30.0)


class ReadsOutsideAProcessGroupOnly(Delegating):
    """Not broken: its offline reader refuses inside a process group, as some libraries' one-
    process tools do (a control: the hygiene read must run as a program of one process)."""

    def read_model_state(self, path):  # type: ignore[no-untyped-def]
        import torch.distributed as dist

        if dist.is_initialized():
            raise RuntimeError("this tool runs in one process: torch.distributed is initialised")
        return self.base.read_model_state(path)  # type: ignore[attr-defined]


class ExitsInLoad(Delegating):
    """Rank 1's process exits inside the load (a library calling os._exit on a bad file)."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        import os

        if ctx.rank == 1:
            os._exit(1)
        self.base.load(state, path, ctx)


class TuplesBecomeLists(Delegating):
    """Every tensor bit-exact; AdamW's betas come back as a list (a pure type drift)."""

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        self.base.load(state, path, ctx)
        for group in state.optim.param_groups:
            group["betas"] = list(group["betas"])


zeroes_moments = _factory(ZeroesMoments, "zeroes_moments")
load_raises_key_error = _factory(LoadRaisesKeyError, "load_raises_key_error")
load_raises_value_error = _factory(LoadRaisesValueError, "load_raises_value_error")
hangs_on_load = _factory(HangsOnLoad, "hangs_on_load")
refuses_on_rank_zero_only = _factory(RefusesOnRankZeroOnly, "refuses_on_rank_zero_only")
refuses_on_rank_zero_while_rank_one_is_slow = _factory(
    RefusesOnRankZeroWhileRankOneIsSlow, "refuses_on_rank_zero_while_rank_one_is_slow"
)
loses_its_trace_after_the_release = _factory(
    LosesItsTraceAfterTheRelease, "loses_its_trace_after_the_release"
)
loses_its_trace_on_rank_one = _factory(LosesItsTraceOnRankOne, "loses_its_trace_on_rank_one")
exits_in_load = _factory(ExitsInLoad, "exits_in_load")
reads_outside_a_process_group_only = _factory(
    ReadsOutsideAProcessGroupOnly, "reads_outside_a_process_group_only"
)
tuples_become_lists = _factory(TuplesBecomeLists, "tuples_become_lists")
crashes_on_save = _factory(CrashesOnSave, "crashes_on_save")


# The gate per difference through pytest, as a maintainer runs it: the same registered strategy
# (one name, so one baseline) before and after a change that zeroes AdamW's moments on load.
_FSDP2_FULL_ADAMW = Supports(
    wrappers=(("fsdp2", "shard"),), kinds=("full",), checks=("roundtrip",), optimizers=("adamw",)
)
full_drift_only = _registered(None, "full_drift_only")
full_drift_and_zeroed_moments = _registered(ZeroesMoments, "full_drift_and_zeroed_moments")
FULL_DRIFT = RegisteredStrategy("fulldsd", full_drift_only, _FSDP2_FULL_ADAMW, storage="dcp")
FULL_DRIFT_ZEROED = RegisteredStrategy(
    "fulldsd", full_drift_and_zeroed_moments, _FSDP2_FULL_ADAMW, storage="dcp"
)

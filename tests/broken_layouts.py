"""Deliberately broken strategies for the parallel layouts (tensor parallel, pipeline stages,
prefixing module wrappers), each caught by the check meant for it (tests/test_layouts.py).
Factories are module-level functions: cells pickle them by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.case import Case
from conformance.layout.builtin import builtin_strategy
from conformance.strategy.protocol import Strategy
from conformance.strategy.wrappers import Fsdp1Wrapper, Fsdp2Wrapper
from tests.broken import Delegating


class TpReplicates(Delegating):
    """Asked for FSDP2 over tensor (or expert) parallelism, applies FSDP2 alone on a 1-D mesh:
    the weights the plan splits (the experts) are sharded by FSDP only, never split over "tp"
    ("ep"); every rank still holds less than the model, so only the layout's sanity rule can
    tell."""

    def wrap(self, model, ctx):  # type: ignore[no-untyped-def]
        return Fsdp2Wrapper().wrap(model, ctx)


class Fsdp1SkipsTp(Delegating):
    """Asked for FSDP1 over tensor parallelism, applies FSDP1 alone over every rank: no weight
    is split over "tp" (FSDP1 records no tensor-parallel spec for its flat parameters), and every
    rank still holds less than the model, so only the layout's sanity rule can tell."""

    def wrap(self, model, ctx):  # type: ignore[no-untyped-def]
        return Fsdp1Wrapper("full_shard", use_orig_params=True).wrap(model, ctx)


class TpIgnored(Delegating):
    """Asked for tensor parallelism, leaves the model whole on every rank."""

    def wrap(self, model, ctx):  # type: ignore[no-untyped-def]
        return model.to(ctx.device)


class DropsLastStage(Delegating):
    """Pipeline stages: the last stage's model keys are left out of the checkpoint (a saver that
    writes only what the first stage holds); the load then restores the optimizer alone there."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        out: dict[str, Any] = self.base._state_dict(state)  # type: ignore[attr-defined]
        if ctx.rank == ctx.world_size - 1:
            out["model"] = {}
        self.base.storage.save(out, path, ctx)  # type: ignore[attr-defined]

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        base = self.base
        loaded = base.storage.load(path, ctx, lambda: base._state_dict(state))  # type: ignore[attr-defined]
        if loaded["model"]:
            base.api.set(state.model, state.optim, loaded)  # type: ignore[attr-defined]
        else:
            set_optimizer_state_dict(
                state.model, state.optim, loaded["optim"], options=base.api._options(loading=True)
            )  # type: ignore[attr-defined]


class SavesFirstPartOnly(Delegating):
    """Several stages per rank (interleaved): a saver that writes the model state of the rank's
    first model part only (`pipeline_parts[0]`), and a load that takes what is there (strict=False):
    every rank's later stages keep their fresh weights, silently."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        out: dict[str, Any] = self.base._state_dict(state)  # type: ignore[attr-defined]
        first = set(state.model.pipeline_parts[0].state_dict())
        out["model"] = {k: v for k, v in out["model"].items() if k in first}
        self.base.storage.save(out, path, ctx)  # type: ignore[attr-defined]

    def load(self, state, path, ctx):  # type: ignore[no-untyped-def]
        import dataclasses

        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

        base = self.base
        loaded = base.storage.load(path, ctx, lambda: base._state_dict(state))  # type: ignore[attr-defined]
        options = base.api._options(loading=True)  # type: ignore[attr-defined]
        set_model_state_dict(state.model, loaded["model"], options=dataclasses.replace(options, strict=False))
        set_optimizer_state_dict(state.model, state.optim, loaded["optim"], options=options)


def _full(value: Any) -> Any:
    return value.full_tensor() if hasattr(value, "full_tensor") else value


class LeaksWrapperPrefix(Delegating):
    """Builds the model's checkpoint from named_parameters() and named_buffers(), gathered to
    whole tensors, keys as the wrapped model names them
    (`layers.0._checkpoint_wrapped_module.attention.wq.weight`; checkpoint_wrapper strips its
    segment from state_dict() only): the plain model cannot load the file."""

    def save(self, state, path, ctx):  # type: ignore[no-untyped-def]
        named = [*state.model.named_parameters(), *state.model.named_buffers()]
        out = {"model": {k: _full(v.detach()) for k, v in named}}
        out["optim"] = self.base._state_dict(state)["optim"]  # type: ignore[attr-defined]
        self.base.storage.save(out, path, ctx)  # type: ignore[attr-defined]


@dataclass
class ShardsExpertsOverTheWorld(Delegating):
    """Not expert-parallel aware: each rank's `experts.0` (another expert on each rank) is
    sharded over every rank with the rest of the model, as if the ranks held one tensor (FSDP2
    on the world's mesh, FSDP1 on the default group), so training runs on a tensor made of
    several experts. It round-trips consistently and each rank holds fewer elements than the
    model: only the experts' sanity rule tells."""

    family: str = "fsdp2"

    def wrap(self, model, ctx):  # type: ignore[no-untyped-def]
        model.expert_parallel = False  # what a wrapper that knows nothing of experts sees
        if self.family == "fsdp2":
            return Fsdp2Wrapper().wrap(model, ctx)
        return Fsdp1Wrapper("full_shard").wrap(model, ctx)


def shards_experts_over_the_world(case: Case) -> Strategy:
    return ShardsExpertsOverTheWorld(builtin_strategy(case), case.family)


def _make(cls: type[Delegating], name: str):  # type: ignore[no-untyped-def]
    def make(case: Case) -> Strategy:
        return cls(builtin_strategy(case))

    make.__name__ = make.__qualname__ = name
    return make


tp_replicates = _make(TpReplicates, "tp_replicates")
fsdp1_skips_tp = _make(Fsdp1SkipsTp, "fsdp1_skips_tp")
tp_ignored = _make(TpIgnored, "tp_ignored")
drops_last_stage = _make(DropsLastStage, "drops_last_stage")
saves_first_part_only = _make(SavesFirstPartOnly, "saves_first_part_only")
leaks_wrapper_prefix = _make(LeaksWrapperPrefix, "leaks_wrapper_prefix")

"""DeepSpeed's ZeRO checkpoints (deepspeed 0.19.8): `engine.save_checkpoint` and
`engine.load_checkpoint` of the engine `deepspeed.initialize` returns, at ZeRO stages 1, 2, 3.

Called as DeepSpeed's getting-started guide trains and checkpoints
(https://www.deepspeed.ai/getting-started/):
- "model_engine, optimizer, _, _ = deepspeed.initialize(args=cmd_args, model=net,
  model_parameters=net.parameters())", here with the cell's own torch optimizer and LR scheduler
  passed in ("optimizer: Optional: a user defined Optimizer ... This overrides any optimizer
  definition in the DeepSpeed json config"; "lr_scheduler: Optional: Learning Rate Scheduler
  Object", deepspeed.initialize's docstring) and a config of ZeRO's stage, fp32,
  "zero_allow_untested_optimizer" (a torch optimizer under ZeRO);
- the training loop: "loss = model_engine(inputs)", "model_engine.backward(loss)",
  "model_engine.step()" (which steps the optimizer and the scheduler and zeroes the gradients);
- "model_engine.save_checkpoint(args.save_dir, ckpt_id, client_state = client_sd)" on every rank
  ("all processes must call this method", its docstring), and
  "_, client_sd = model_engine.load_checkpoint(args.load_dir, args.ckpt_id)" into a fresh
  engine ("under ZeRO3, one cannot load checkpoint with engine.load_checkpoint() right after
  engine.save_checkpoint() ... reinitialize engine before load_checkpoint()"); without a tag
  both use the `latest` file save_checkpoint writes.

The protocol's extensions for a framework that owns the step and partitions the state
(conformance.strategy.protocol): `own_training` returns the engine as TrainState.engine (the
harness trains through it) and a StateView, which reads the live state through DeepSpeed's
documented accessors ("Debugging: deepspeed.utils.safe_get_full_fp32_param,
safe_get_full_optimizer_state"), parameters whole through deepspeed.zero.GatheredParameters
under ZeRO-3; the scalar entries of a flat partition's state (Adam's step) come from the torch
optimizer DeepSpeed wraps, the cell's own.

On the CPU, DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu, set here when the world has no
GPU) runs its collectives on the world's gloo group. Its communication backend loads a
shared-memory op it otherwise compiles at the first `initialize` (minutes on a busy host, behind
a file lock a killed compile leaves behind): install it prebuilt, `DS_BUILD_SHM_COMM=1 pip
install --no-cache-dir --no-build-isolation deepspeed==0.19.8` (README); without it the cells
are skips that say so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from conformance.case import Case, Transfer
from conformance.models import model_class
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.world import RankContext

DIST = "deepspeed"
STAGES = {"zero1": 1, "zero2": 2, "zero3": 3}
LAYOUTS: tuple[tuple[str, str], ...] = tuple(("deepspeed", s) for s in STAGES)


def _use_cpu_accelerator(ctx: RankContext) -> None:
    if ctx.device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _as_in_a_fresh_process() -> None:
    """DeepSpeed caches the clone of the world group it makes at the first initialize
    (deepspeed.utils.groups). A warm world destroys each cell's groups with torch.distributed,
    which DeepSpeed does not see (its own deepspeed.comm.destroy_process_group drops its
    references): a later cell's initialize would broadcast over a destroyed group ("Group ...
    is not registered"). When the cached group is no longer torch's, drop DeepSpeed's
    references as its destroy_process_group does, so that every cell starts as in a new process."""
    from deepspeed.utils import groups
    from torch.distributed.distributed_c10d import _world

    cached = groups._WORLD_GROUP
    if cached is not None and cached not in _world.pg_map:
        groups._release_process_group_references(None)


def _whole(param: nn.Parameter, partition: torch.Tensor) -> torch.Tensor:
    """ZeRO 1-2: the parameter's whole value of a flat partition's tensor (the fp32 master or
    an optimizer state entry), as DeepSpeed's own get_full_hp_param assembles it: this rank's
    fragment at the parameter's `_hp_mapping` addresses, summed over the data-parallel group."""
    import torch.distributed as dist

    whole = torch.zeros(param.numel(), dtype=partition.dtype, device=partition.device)
    mapping = param._hp_mapping  # type: ignore[attr-defined]
    if mapping is not None:
        lp, hp = mapping.lp_fragment_address, mapping.hp_fragment_address
        whole.narrow(0, lp.start, lp.numel).copy_(partition.narrow(0, hp.start, hp.numel))
    dist.all_reduce(whole, group=param._dp_group)  # type: ignore[attr-defined]
    return whole.reshape(param.shape)


@dataclass
class ZeroView:
    """The live state by the model's parameters (conformance.strategy.protocol.StateView).
    groups: the model's parameters of each param group of the cell's optimizer, taken before
    DeepSpeed flattened them; its torch optimizer then holds one flat partition per group.

    ZeRO-3: DeepSpeed's documented accessors (safe_get_full_optimizer_state,
    safe_get_full_fp32_param; GatheredParameters for the parameters). ZeRO 1-2: the same
    fragments those accessors read, through each parameter's `_hp_mapping` addresses: the
    accessors link a parameter to its optimizer state lazily, once, after the first step of the
    first param group, so they raise for every parameter of another group and for every
    parameter after load_checkpoint until a step (docs/libraries.md)."""

    engine: Any
    model: nn.Module
    groups: list[list[nn.Parameter]]

    @property
    def _base(self) -> torch.optim.Optimizer:
        return self.engine.optimizer.optimizer  # the cell's torch optimizer, over ZeRO's flat partitions

    def _stage3(self) -> bool:
        return self.engine.zero_optimization_stage() == 3

    def parameters_by_name(self) -> Mapping[str, torch.Tensor]:
        import deepspeed

        params = list(self.model.named_parameters())
        if not self._stage3():
            return {name: p.detach().clone() for name, p in params}
        with deepspeed.zero.GatheredParameters([p for _, p in params]):
            return {name: p.detach().clone() for name, p in params}

    def _entries(self, param: nn.Parameter, flat: torch.Tensor, keys: list[str]) -> dict[str, Any]:
        if self._stage3():
            from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

            out = {k: safe_get_full_optimizer_state(param, k) for k in keys}
            return {**out, "fp32_master": safe_get_full_fp32_param(param)}
        state = self._base.state[flat]
        return {**{k: _whole(param, state[k]) for k in keys}, "fp32_master": _whole(param, flat)}

    def _flats(self, group: int) -> list[torch.Tensor]:
        """The flat fp32 partitions of a param group on this rank, where each stage keeps them:
        ZeRO 1-2 one per group (`single_partition_of_fp32_groups`, also the torch optimizer's
        "params"); ZeRO-3 one per sub-group (`fp32_partitioned_groups_flat`; it empties the
        torch optimizer's "params" between steps)."""
        zero = self.engine.optimizer
        if not self._stage3():
            return [zero.single_partition_of_fp32_groups[group]]
        return [
            flat
            for sub, flat in enumerate(zero.fp32_partitioned_groups_flat)
            if zero.sub_group_to_group_id[sub] == group
        ]

    @property
    def state(self) -> Mapping[Any, Mapping[str, Any]]:
        out: dict[Any, dict[str, Any]] = {}
        base = self._base
        for i, params in enumerate(self.groups):
            flats = self._flats(i)
            entries = base.state.get(flats[0], {}) if flats else {}
            keys = sorted(k for k, v in entries.items() if torch.is_tensor(v) and v.dim() > 0)
            scalars = {k: v for k, v in entries.items() if k not in keys}  # Adam's step: one per partition
            for param in params if entries else ():
                out[param] = {**self._entries(param, flats[0], keys), **scalars}
        return out

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [
            {**{k: v for k, v in group.items() if k != "params"}, "params": params}
            for params, group in zip(self.groups, self._base.param_groups, strict=True)
        ]


@dataclass(frozen=True)
class DeepSpeedZero:
    """One ZeRO stage (the cell's sharding: zero1, zero2, zero3)."""

    case: Case

    @property
    def stage(self) -> int:
        return STAGES[self.case.sharding]

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return model.to(ctx.device)  # the engine wraps it in own_training, with the optimizer

    def config(self) -> dict[str, Any]:
        x, _ = model_class(self.case.model).batch(torch.Generator().manual_seed(0))  # type: ignore[attr-defined]
        return {
            "train_micro_batch_size_per_gpu": int(x.shape[0]),
            "gradient_accumulation_steps": 1,
            # ZeRO-3 keeps a parameter below stage3_param_persistence_threshold (1e5 elements by
            # default: every parameter of these tiny models) whole on every rank; 0 partitions all
            "zero_optimization": {"stage": self.stage}
            | ({"stage3_param_persistence_threshold": 0} if self.stage == 3 else {}),
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 2**31,
        }

    def own_training(self, state: TrainState, ctx: RankContext) -> TrainState:
        _use_cpu_accelerator(ctx)
        import deepspeed

        _as_in_a_fresh_process()
        groups = [list(group["params"]) for group in state.optim.param_groups]
        engine, optimizer, _, scheduler = deepspeed.initialize(
            model=state.model, optimizer=state.optim, lr_scheduler=state.scheduler, config=self.config()
        )
        view = ZeroView(engine, state.model, groups)
        return TrainState(state.model, optimizer, scheduler, holders=(view,), engine=engine)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        state.engine.save_checkpoint(str(path))  # type: ignore[union-attr]

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        loaded, _ = state.engine.load_checkpoint(str(path))  # type: ignore[union-attr]
        if loaded is None:
            raise FileNotFoundError(f"DeepSpeed's load_checkpoint found no checkpoint in {path}")


def skips_on(cell: Case | Transfer, backend: str) -> str | None:
    """Without its prebuilt shared-memory op, DeepSpeed compiles one in the first cell's world."""
    if not installed_op():
        return (
            "deepspeed was installed without its prebuilt shared-memory op, which its CPU backend would "
            "compile inside the first cell: DS_BUILD_SHM_COMM=1 pip install --no-cache-dir "
            "--no-build-isolation deepspeed"
        )
    return None


def installed_op() -> bool:
    """Whether deepspeed was installed with its shared-memory op prebuilt (read from the
    distribution's files: importing deepspeed here would pick its accelerator in the pytest
    process)."""
    import importlib.metadata

    try:
        files = importlib.metadata.files(DIST) or []
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(f.name.startswith("deepspeed_shm_comm_op") for f in files)


ZERO = RegisteredStrategy(
    name="deepspeed",
    factory=DeepSpeedZero,
    supports=Supports(
        wrappers=(),
        layouts=LAYOUTS,
        kinds=("sharded",),
        checks=("resume", "roundtrip"),
        optimizers=("adam", "adamw", "adamw+groups", "adamw+sched", "sgd"),
        models=("mlp",),
    ),
    storage="deepspeed",
    requires=(DIST,),
    description="DeepSpeed's engine (deepspeed.initialize with the cell's optimizer and scheduler, ZeRO "
    "stage 1, 2 or 3, fp32): save_checkpoint and load_checkpoint into a fresh engine, as its guide calls them",
    skips_on=skips_on,
)

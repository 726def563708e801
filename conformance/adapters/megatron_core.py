"""Megatron-core's distributed checkpointing (`megatron.core.dist_checkpointing`, megatron-core
0.16.1): the model's and the optimizer's state as Megatron's sharded state dict of ShardedTensors,
written and read by `dist_checkpointing.save` / `load` in its `torch_dist` format.

Called as its documentation (docs/api-guide/core/dist_checkpointing.md: "Using the library
requires defining sharded state_dict dictionaries with functions from mapping and optimizer
modules. Those state dicts can be saved or loaded with a serialization module using strategies
from strategies module") and its own unit tests (tests/unit_tests/dist_checkpointing/
test_optimizer.py's `Model.sharded_state_dict` and `test_optimizer_params`) build them:
- the model: `model.state_dict(keep_vars=True)`, each tensor a
  `ShardedTensor.from_rank_offsets(key, local, *(axis, rank_offset, fragments), replica_id=...)`:
  a DTensor's local shard at its `Shard(axis)` mesh coordinate, `replica_id` its coordinates on
  the mesh dimensions it is replicated on; a plain tensor held by several ranks (DDP, a TP layer
  left replicated) has replica_id the rank's index among its holders, one held by one rank (a
  pipeline stage's) 0;
- the torch optimizer: `get_param_id_to_sharded_param_map(model_sharded, params)` and
  `optim_state_to_sharding_state(optim.state_dict(), map, exclude_keys="step")`, the step kept
  as one common step as Megatron's FP32Optimizer keeps it (`_extract_common_per_param_step`, back
  with `_restore_common_per_param_step`); a load's template is made as Megatron's Adam
  `init_state_fn` makes it (zero `exp_avg`, `exp_avg_sq` where a parameter has no state), then
  `optimizer.load_state_dict` of what `load` returns, as FP32Optimizer.load_state_dict does;
- the LR scheduler's state_dict in the common part (`common.pt`, written by rank 0).

Two rows: `megatron_dist_ckpt` saves with `get_default_save_sharded_strategy("torch_dist")` and
loads with the default strategy; `megatron_dist_ckpt_fully_parallel` wraps them in
`FullyParallelSaveStrategyWrapper` / `FullyParallelLoadStrategyWrapper` over the whole world
(their default group), as Megatron's training does with --ckpt-fully-parallel-save/-load. Its
load exchanges the shards each rank read with `exchange_algo="gather_object"` on gloo (a
documented option: the default "broadcast" and "gather_rounds" put the exchanged tensors on
"cuda", exchange_utils.py); on nccl with the default.

The CPU shim (only while Megatron's save or load runs, only where CUDA is absent; no line of
Megatron's changed): `torch.cuda.synchronize` is a no-op, and `torch.cuda.current_device()` gives
"cpu". Its torch_dist save calls the first after staging the tensors to the host
(filesystem_async.py `preload_tensors`, "Torch not compiled with CUDA enabled" without it) and its
fully-parallel load after the exchange (fully_parallel.py), and its save's finalize broadcasts the
failure flag in `torch.tensor(..., device=torch.cuda.current_device())` (state_dict_saver.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from conformance.adapters import ADAPTER_MODELS
from conformance.case import Case
from conformance.layout.registry import layout_of
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

DIST = "megatron-core"
IMPORTS = ("megatron.core.dist_checkpointing", "megatron.core.optimizer.optimizer")
# the layouts it is given, wrapped by the suite's own code (Megatron's parallel layers need its
# parallel_state and CUDA): DDP (replicas) and pipeline stages (each rank its own keys). Not yet
# TP alone: under the suite's TP wrap get_param_id_to_sharded_param_map finds no ShardedTensor for
# the DTensor parameters ("Param id 0 does not match any model sharded param"), not yet explained
LAYOUTS: tuple[tuple[str, str], ...] = (("ddp", "replicate"), ("pp", "stages"))
# Megatron builds Adam(W) or SGD (get_megatron_optimizer); only Adam has an init_state_fn, which
# a load needs for its template (for SGD it is None)
OPTIMIZERS = ("adam", "adamw", "adamw+groups", "adamw+sched")


@contextlib.contextmanager
def cpu_shim() -> Iterator[None]:
    """Where CUDA is absent, torch.cuda.synchronize a no-op and torch.cuda.current_device()
    "cpu" while Megatron's calls run; put back after."""
    if torch.cuda.is_available():
        yield
        return
    kept = (torch.cuda.synchronize, torch.cuda.current_device)
    torch.cuda.synchronize = lambda *args, **kwargs: None  # type: ignore[assignment]
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    try:
        yield
    finally:
        torch.cuda.synchronize, torch.cuda.current_device = kept


def holders(names: list[str]) -> dict[str, list[int]]:
    """name -> the ranks that hold a tensor of that name (every rank calls it: a collective)."""
    everyone: list[list[str] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, names)
    out: dict[str, list[int]] = {}
    for rank, held in enumerate(everyone):
        for name in held or ():
            out.setdefault(name, []).append(rank)
    return out


def sharded_tensor(key: str, tensor: torch.Tensor, held_by: list[int]) -> Any:
    """The ShardedTensor of one model tensor, as from_rank_offsets states it."""
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.utils import to_local_if_dtensor
    from torch.distributed.tensor import DTensor, Replicate, Shard

    if not isinstance(tensor, DTensor):
        return ShardedTensor.from_rank_offsets(key, tensor, replica_id=held_by.index(dist.get_rank()))
    offsets, replica = [], []
    coordinate = tensor.device_mesh.get_coordinate() or []
    for dim, placement in enumerate(tensor.placements):
        if isinstance(placement, Shard):
            offsets.append((placement.dim, coordinate[dim], tensor.device_mesh.size(dim)))
        elif isinstance(placement, Replicate):
            replica.append(coordinate[dim])
        else:
            raise NotImplementedError(f"{key}: placement {placement} has no ShardedTensor offsets")
    local = to_local_if_dtensor(tensor)  # the tensor get_param_id_to_sharded_param_map matches
    return ShardedTensor.from_rank_offsets(key, local, *offsets, replica_id=tuple(replica) or 0)


def model_sharded(model: nn.Module) -> dict[str, Any]:
    """The model's sharded state dict: every parameter and buffer, keyed by its name; a
    parameter as the module holds it (the optimizer's object: a wrapper's state-dict hooks may
    hand out another DTensor over the same shard, which the optimizer map would not find)."""
    state = model.state_dict(keep_vars=True)
    params = dict(model.named_parameters(remove_duplicate=False))
    held = holders(sorted(state))
    return {
        name: sharded_tensor(name, params.get(name, tensor), held[name]) for name, tensor in state.items()
    }


def trained_params(optim: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters in its state_dict's order (every group's, in turn)."""
    return [param for group in optim.param_groups for param in group["params"]]


def init_adam_state(optim: torch.optim.Optimizer) -> None:
    """Megatron's Adam init_state_fn (megatron/core/optimizer/__init__.py): zero exp_avg and
    exp_avg_sq for each parameter without state, so a load has a template."""
    for param in trained_params(optim):
        if len(optim.state[param]) == 0:
            optim.state[param]["exp_avg"] = torch.zeros_like(param.data)
            optim.state[param]["exp_avg_sq"] = torch.zeros_like(param.data)


def optim_sharded(optim: torch.optim.Optimizer, model_state: dict[str, Any]) -> dict[str, Any]:
    """FP32Optimizer.sharded_state_dict's steps for a torch optimizer."""
    from megatron.core.dist_checkpointing.optimizer import (
        get_param_id_to_sharded_param_map,
        optim_state_to_sharding_state,
    )
    from megatron.core.optimizer.optimizer import MegatronOptimizer

    state = optim.state_dict()
    id_map = get_param_id_to_sharded_param_map(model_state, trained_params(optim))
    step = MegatronOptimizer._extract_common_per_param_step(state)
    optim_state_to_sharding_state(state, id_map, exclude_keys=("step",))
    if step is not None:
        state["state"]["common_step"] = step
    return state


def load_optim(optim: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """FP32Optimizer.load_state_dict's steps: the common step back on each parameter's state."""
    from megatron.core.optimizer.optimizer import MegatronOptimizer

    if "common_step" in state["state"]:
        MegatronOptimizer._restore_common_per_param_step(state, state["state"].pop("common_step"))
    optim.load_state_dict(state)


@dataclass(frozen=True)
class MegatronDistCkpt:
    """dist_checkpointing.save / load of the cell's state; fully_parallel: through Megatron's
    fully-parallel strategy wrappers."""

    case: Case
    fully_parallel: bool = False

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return layout_of(self.case).build(self.case).wrap(model, ctx)

    def sharded(self, state: TrainState) -> dict[str, Any]:
        model = model_sharded(state.model)
        out = {"model": model, "optimizer": optim_sharded(state.optim, model)}
        if state.scheduler is not None:
            out["scheduler"] = state.scheduler.state_dict()
        return out

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from megatron.core import dist_checkpointing
        from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy
        from megatron.core.dist_checkpointing.strategies.fully_parallel import (
            FullyParallelSaveStrategyWrapper,
        )

        if ctx.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        strategy = get_default_save_sharded_strategy("torch_dist")
        if self.fully_parallel:
            strategy = FullyParallelSaveStrategyWrapper(strategy)
        with cpu_shim():
            dist_checkpointing.save(self.sharded(state), str(path), strategy)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from megatron.core import dist_checkpointing
        from megatron.core.dist_checkpointing.serialization import get_default_load_sharded_strategy
        from megatron.core.dist_checkpointing.strategies.fully_parallel import (
            FullyParallelLoadStrategyWrapper,
        )

        init_adam_state(state.optim)
        template = self.sharded(state)
        with cpu_shim():
            strategy = get_default_load_sharded_strategy(str(path))
            if self.fully_parallel:
                algo = {"exchange_algo": "gather_object"} if ctx.backend == "gloo" else {}
                strategy = FullyParallelLoadStrategyWrapper(strategy, **algo)
            loaded = dist_checkpointing.load(template, str(path), strategy)
        live = state.model.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, value in loaded["model"].items():
                target = live[name]
                target = target.to_local() if hasattr(target, "to_local") else target
                target.copy_(value)
        load_optim(state.optim, loaded["optimizer"])
        if state.scheduler is not None:
            state.scheduler.load_state_dict(loaded["scheduler"])


def plain(case: Case) -> MegatronDistCkpt:
    return MegatronDistCkpt(case)


def fully_parallel(case: Case) -> MegatronDistCkpt:
    return MegatronDistCkpt(case, fully_parallel=True)


# torch_dist: DCP's `__{rank}_{n}.distcp` (two writer threads a rank) and `.metadata`, beside
# Megatron's `common.pt` (the common state, rank 0) and `metadata.json` (its format's name)
STORAGE = OwnFormat(
    "megatron_torch_dist",
    data="*.distcp",
    rank_file="__{rank}_*.distcp",
    metadata=(".metadata",),
    damage=("flipped_bytes", "missing_metadata", "missing_shard", "other_model", "truncated"),
)
SUPPORTS = Supports(
    wrappers=LAYOUTS,
    kinds=("sharded",),
    checks=("corrupt", "relayout", "reshard", "resume", "roundtrip"),
    optimizers=OPTIMIZERS,
    models=ADAPTER_MODELS,
)
SHIM = (
    "; CPU shim while its calls run where CUDA is absent: torch.cuda.synchronize a no-op, "
    'torch.cuda.current_device() "cpu" (its save stages and finalizes through them)'
)

MEGATRON_DIST_CKPT = RegisteredStrategy(
    name="megatron_dist_ckpt",
    factory=plain,
    supports=SUPPORTS,
    storage=STORAGE,
    requires=(DIST,),
    imports=IMPORTS,
    description="megatron.core.dist_checkpointing.save(sharded_state_dict, dir, torch_dist strategy) "
    "of ShardedTensor.from_rank_offsets of each model tensor (replica_id for replicas) and the torch "
    "optimizer through optim_state_to_sharding_state, the scheduler in the common state; "
    "dist_checkpointing.load into the fresh state's template" + SHIM,
)
# the same row through Megatron's fully-parallel strategy wrappers
MEGATRON_DIST_CKPT_FULLY_PARALLEL = dataclasses.replace(
    MEGATRON_DIST_CKPT,
    name="megatron_dist_ckpt_fully_parallel",
    factory=fully_parallel,
    description="megatron_dist_ckpt through FullyParallelSaveStrategyWrapper and "
    "FullyParallelLoadStrategyWrapper over the world (exchange_algo gather_object on gloo: its "
    "default exchanges put tensors on cuda)" + SHIM,
)

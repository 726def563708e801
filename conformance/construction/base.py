"""What a construction axis value is: how the harness builds the fresh model that a checkpoint is
loaded into. By its constructor on every rank (the default), or on the meta device, as
torchtitan, transformers and most fine-tuning stacks build a large model, and then given storage
and its own initialisation before the load.

A model built on the meta device has no values: the load gives it the state a state dict holds,
and nothing else does. What the state dict does not hold (a non-persistent buffer, a rotary
cache computed in `__init__`) is the model's own initialisation's to compute, and a path that
skips it leaves uninitialised memory in the model. The recipe here is the documented one:
`model.to_empty(device=...)`, the model's `tie_weights()` where it has one (to_empty gives a
tied pair storage each, before a wrap; Hugging Face's models re-tie so), then
`reset_parameters()` on every module that has one (the FSDP2
example's `model.reset_parameters()`; torch's own FSDP tests call it on every module that
manages parameters or buffers of its own); FSDP1 does both itself while wrapping (its documented
behaviour when the module is on the meta device and no `param_init_fn` is given). Where the
wrapper needs storage first (DDP broadcasts rank 0's values while wrapping) the model gets it
before the wrap; a sharding wrapper gets the meta model and each rank gives storage to its shard.

Rank-0 init (`rank0_builds`), as Accelerate's cpu_ram_efficient_loading, transformers' low-memory
loading and FSDP1's sync_module_states do: rank 0 builds the model by its constructor, every other
rank on the meta device, and those get storage and their own initialisation as above (the
non-persistent buffers the state dict does not hold are theirs to compute); the full state is then
loaded, or broadcast from rank 0 (StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


class Materialize(enum.Enum):
    """Where a layout gives a meta-device model its storage (a layout's field)."""

    BEFORE_WRAP = "before the wrap"  # the wrapper needs real tensors (DDP, no wrapper)
    AFTER_WRAP = "after the wrap"  # the wrapper shards meta tensors; to_empty then gives each shard storage
    BY_WRAPPER = "by the wrapper"  # the wrapper materialises it (FSDP1: to_empty + reset_parameters)


def reset_parameters(model: nn.Module) -> None:
    """Every module's own initialisation of what it manages directly, where it has one."""
    with torch.no_grad():
        for module in model.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()


def on_meta(model: nn.Module) -> bool:
    """Whether every parameter and buffer of the model is on the meta device."""
    tensors = list(itertools.chain(model.parameters(), model.buffers()))
    return bool(tensors) and all(t.is_meta for t in tensors)


class NotBuiltOnMeta(RuntimeError):
    """The fresh model of a meta-device cell was not on the meta device when it was built: the cell
    would test the constructor's model under another name (a vacuous pass). Also raised where a
    rank-0 init's rank 0 built on the meta device: it would test the meta construction instead."""


def _current_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


@dataclass(frozen=True)
class Construction:
    """name: the axis value, a word of every cell id but the default's. on_meta: the model is
    built under `torch.device("meta")` and gets its storage where its layout says (Materialize).
    initialise: after `to_empty`, the model's own initialisation (reset_parameters); False leaves
    the uninitialised storage as it is (what a path that skips it does). rank0_builds: rank 0
    builds by the constructor, and only the other ranks as on_meta says (rank-0 init; with
    on_meta). description: what it builds."""

    name: str
    description: str = ""
    on_meta: bool = False
    initialise: bool = True
    rank0_builds: bool = False

    def on_meta_at(self, rank: int) -> bool:
        """Whether this rank builds the fresh model on the meta device."""
        return self.on_meta and not (self.rank0_builds and rank == 0)

    def build(
        self,
        make: Callable[[], nn.Module],
        wrap: Callable[[nn.Module], nn.Module],
        device: torch.device,
        where: Materialize,
        seed: int = 0,
        rank: int | None = None,
    ) -> nn.Module:
        """The fresh model: made (by `make`, the model's constructor), wrapped (by `wrap`), and,
        built on the meta device, given storage on `device` where the layout says. rank: this
        rank (default: the process group's, else 0)."""
        rank = _current_rank() if rank is None else rank
        if not self.on_meta_at(rank):
            model = make()
            if self.rank0_builds and any(
                t.is_meta for t in itertools.chain(model.parameters(), model.buffers())
            ):
                raise NotBuiltOnMeta(f"rank {rank} of a rank-0 init holds meta tensors after its constructor")
            return wrap(model)
        with torch.device("meta"):
            model = make()
        if not on_meta(model):
            raise NotBuiltOnMeta(
                f"{type(model).__name__} holds tensors off the meta device after its construction"
            )
        with torch.random.fork_rng(devices=[]):  # the initialisation draws from the cell's seed
            torch.manual_seed(seed)
            if where is Materialize.BEFORE_WRAP:
                return wrap(self._materialise(model, device))
            wrapped = wrap(model)
            return wrapped if where is Materialize.BY_WRAPPER else self._materialise(wrapped, device)

    def _materialise(self, model: nn.Module, device: torch.device) -> nn.Module:
        model.to_empty(device=device)
        tie = getattr(model, "tie_weights", None)
        if callable(tie):  # to_empty gives each name storage of its own (Hugging Face's models re-tie so)
            tie()
        if self.initialise:
            reset_parameters(model)
        return model

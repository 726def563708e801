"""State-dict APIs: how model and optimizer state is taken and put back."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from conformance.models import build_model
from conformance.optim.several import each_state, load_each
from conformance.strategy.protocol import StateDict
from conformance.strategy.wrappers import unwrap


@dataclass(frozen=True)
class KnowsTheModel:
    """A state-dict API that needs a non-wrapped model of the cell's architecture (its
    parameter names and order) for FSDP.rekey_optim_state_dict, whose documentation takes the
    non-wrapped model. builtin_strategy binds `model` to the cell's."""

    model: str = field(default="", kw_only=True)

    def nonwrapped(self) -> nn.Module:
        if not self.model:
            raise ValueError(f"{type(self).__name__} needs the cell's model name (builtin_strategy binds it)")
        return build_model(self.model, seed=0)

    def by_name(self, osd: StateDict) -> StateDict:
        """An optimizer state dict keyed by parameter index (a plain `optimizer.state_dict()`,
        as DDP or a plain module saves it) re-keyed by parameter name, the documented
        conversion before FSDP1 or get/set_state_dict can load it
        (`rekey_optim_state_dict(osd, OptimStateKeyType.PARAM_NAME, nonwrapped_model)`); a
        dict keyed by name is returned as it is. The param groups' `params` tell which it is:
        the state alone cannot when it is empty (no step taken yet)."""
        listed = [p for group in (osd or {}).get("param_groups", []) for p in group.get("params", [])]
        if not listed or not all(isinstance(p, int) for p in listed):
            return osd
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import OptimStateKeyType

        return FSDP.rekey_optim_state_dict(osd, OptimStateKeyType.PARAM_NAME, self.nonwrapped())


@dataclass(frozen=True)
class PlainStateDict:
    """module.state_dict() and optimizer.state_dict(), as with DDP or no wrapper; several
    optimizers: each one's state_dict() in a list."""

    takes_optimizers: ClassVar[bool] = True

    def get(self, model: nn.Module, optim: torch.optim.Optimizer) -> StateDict:
        return {"model": unwrap(model).state_dict(), "optim": each_state(optim, lambda o: o.state_dict())}

    def set(self, model: nn.Module, optim: torch.optim.Optimizer, state: StateDict) -> None:
        unwrap(model).load_state_dict(state["model"])
        load_each(optim, state["optim"], lambda o, saved: o.load_state_dict(saved))


@dataclass(frozen=True)
class Fsdp1StateDict(KnowsTheModel):
    """FSDP1's state_dict_type context, plus FSDP.optim_state_dict / optim_state_dict_to_load
    (several optimizers: each called once per optimizer, as they take one, their results in a list)."""

    takes_optimizers: ClassVar[bool] = True

    kind: str  # full | sharded | local
    offload_to_cpu: bool = False
    rank0_only: bool = False
    optim_offload_to_cpu: bool | None = None  # the optimizer's own offload; None: as the model's

    @property
    def _optim_offload(self) -> bool:
        return self.offload_to_cpu if self.optim_offload_to_cpu is None else self.optim_offload_to_cpu

    def _context(self, model: nn.Module) -> AbstractContextManager[object]:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType
        from torch.distributed.fsdp import api as fsdp_api

        if self.kind == "full":
            return FSDP.state_dict_type(
                model,
                StateDictType.FULL_STATE_DICT,
                fsdp_api.FullStateDictConfig(offload_to_cpu=self.offload_to_cpu, rank0_only=self.rank0_only),
                fsdp_api.FullOptimStateDictConfig(
                    offload_to_cpu=self._optim_offload, rank0_only=self.rank0_only
                ),
            )
        if self.kind == "sharded":
            return FSDP.state_dict_type(
                model,
                StateDictType.SHARDED_STATE_DICT,
                fsdp_api.ShardedStateDictConfig(offload_to_cpu=self.offload_to_cpu),
                fsdp_api.ShardedOptimStateDictConfig(offload_to_cpu=self.offload_to_cpu),
            )
        if self.kind == "local":
            return FSDP.state_dict_type(model, StateDictType.LOCAL_STATE_DICT)
        raise ValueError(f"unknown FSDP1 state-dict kind {self.kind!r}")

    def get(self, model: nn.Module, optim: torch.optim.Optimizer) -> StateDict:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with self._context(model):
            return {
                "model": model.state_dict(),
                "optim": each_state(optim, lambda o: FSDP.optim_state_dict(model, o)),
            }

    def set(self, model: nn.Module, optim: torch.optim.Optimizer, state: StateDict) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with self._context(model):
            model.load_state_dict(state["model"])
            load_each(
                optim,
                state["optim"],
                lambda o, saved: o.load_state_dict(
                    FSDP.optim_state_dict_to_load(model, o, self.by_name(saved))
                ),
            )


@dataclass(frozen=True)
class DistributedStateDict(KnowsTheModel):
    """torch.distributed.checkpoint.state_dict: get_state_dict / set_state_dict.

    broadcast_from_rank0: on load set_model_state_dict / set_optimizer_state_dict broadcast rank
    0's state; only rank 0 passes it (others {}, the recipe of upstream's own broadcast test), or
    with every_rank each rank passes the state it loaded: StateDictOptions' documentation asks
    rank 0 for the full state and says nothing of what the other ranks pass, and upstream's
    test_setting_meta_device_model_broadcasting_and_memory passes it on every rank.
    """

    full_state_dict: bool
    cpu_offload: bool = False
    broadcast_from_rank0: bool = False
    # param groups keyed by parameter name ("param_groups.<fqn>.lr"), as torchtitan asks for
    # its pipeline stages; only set when True (older torch lacks the option)
    flatten_optimizer_state_dict: bool = False
    every_rank: bool = False
    # get_state_dict, set_state_dict and set_optimizer_state_dict take an iterable of optimizers
    # (their documentation): several optimizers are given as the OptimizerList they are
    takes_optimizers: ClassVar[bool] = True

    def _options(self, *, loading: bool = False):  # type: ignore[no-untyped-def]
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        flat = {"flatten_optimizer_state_dict": True} if self.flatten_optimizer_state_dict else {}
        return StateDictOptions(
            full_state_dict=self.full_state_dict,
            cpu_offload=self.cpu_offload,
            broadcast_from_rank0=self.broadcast_from_rank0 and loading,
            **flat,
        )

    def get(self, model: nn.Module, optim: torch.optim.Optimizer) -> StateDict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(model, optim, options=self._options())
        return {"model": model_sd, "optim": optim_sd}

    def set(self, model: nn.Module, optim: torch.optim.Optimizer, state: StateDict) -> None:
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import set_state_dict

        if self.broadcast_from_rank0:
            # Only rank 0 passes the state, the others {} (or, every_rank, each its own). It goes
            # through the per-part functions: set_state_dict itself treats an empty model
            # state dict as "optimizer only" and skips the broadcast rank 0 enters (a hang).
            from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

            rank0 = self.every_rank or dist.get_rank() == 0
            set_model_state_dict(model, state["model"] if rank0 else {}, options=self._options(loading=True))
            set_optimizer_state_dict(
                model,
                optim,
                self.by_name(state["optim"]) if rank0 else {},
                options=self._options(loading=True),
            )
            return
        set_state_dict(
            model,
            optim,
            model_state_dict=state["model"],
            optim_state_dict=self.by_name(state["optim"]),
            options=self._options(loading=True),
        )


@dataclass(frozen=True)
class LegacyFullOptim(KnowsTheModel):
    """FSDP1's older full optimizer functions, as in the widely copied FSDP tutorial: the model
    under FULL_STATE_DICT; the optimizer through full_optim_state_dict (rank 0), re-keyed to
    parameter ids like a plain optimizer.state_dict() with the non-wrapped model, as
    rekey_optim_state_dict's docstring does; on load re-keyed back to names the same way, then
    scatter_full_optim_state_dict (rank 0 holds it, scatters) or shard_full_optim_state_dict
    (every rank holds it)."""

    load_with: str  # scatter | shard
    rank0_only: bool = False

    def get(self, model: nn.Module, optim: torch.optim.Optimizer) -> StateDict:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import OptimStateKeyType, StateDictType
        from torch.distributed.fsdp import api as fsdp_api

        config = fsdp_api.FullStateDictConfig(rank0_only=self.rank0_only)
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):
            model_sd = model.state_dict()
        osd = FSDP.full_optim_state_dict(model, optim)  # rank 0 only; {} elsewhere
        if osd:  # as documented: "loadable to a non-wrapped model"
            osd = FSDP.rekey_optim_state_dict(osd, OptimStateKeyType.PARAM_ID, self.nonwrapped())
        return {"model": model_sd, "optim": osd}

    def set(self, model: nn.Module, optim: torch.optim.Optimizer, state: StateDict) -> None:
        import torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import OptimStateKeyType

        self._load_model(model, state)
        osd = state["optim"]
        if osd:  # as documented: keyed by the non-wrapped model's names, then sharded
            osd = FSDP.rekey_optim_state_dict(osd, OptimStateKeyType.PARAM_NAME, self.nonwrapped())
        if self.load_with == "scatter":
            sharded = FSDP.scatter_full_optim_state_dict(
                osd if dist.get_rank() == 0 else None, model, optim=optim
            )
        else:
            sharded = FSDP.shard_full_optim_state_dict(osd, model, optim=optim)
        optim.load_state_dict(sharded)

    def _load_model(self, model: nn.Module, state: StateDict) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType

        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
            model.load_state_dict(state["model"])


@dataclass(frozen=True)
class TutorialRank0Init(LegacyFullOptim):
    """The FSDP tutorial's resume recipe: the model's full state dict (rank0_only) and
    full_optim_state_dict in one file; to resume, rank 0 loads the weights into the plain,
    unwrapped model (`before_wrap`), FSDP(sync_module_states=True) broadcasts them to the
    other ranks while wrapping, and scatter_full_optim_state_dict hands each rank its
    optimizer shard. (The tutorial also sets offload_to_cpu=True: the sd_full_offload_rank0
    row has that half.)"""

    load_with: str = "scatter"
    rank0_only: bool = True
    sync_module_states = True  # what the wrapper must do for this API
    # sync_module_states=True raises "The module has CPU parameters or buffers when
    # `sync_module_states=True`, which requires them to be on GPU" for CPU modules (torch 2.13)
    needs_accelerator = "FSDP1 sync_module_states=True refuses CPU modules"

    def before_wrap(self, model: nn.Module, state: StateDict, rank: int) -> None:
        if rank == 0:
            model.load_state_dict(state["model"])

    def _load_model(self, model: nn.Module, state: StateDict) -> None:
        pass  # loaded before wrapping


@dataclass(frozen=True)
class LegacyShardedOptim:
    """FSDP1 SHARDED_STATE_DICT for the model; sharded_optim_state_dict on save and
    flatten_sharded_optim_state_dict on load for the optimizer."""

    def get(self, model: nn.Module, optim: torch.optim.Optimizer) -> StateDict:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType

        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
            return {"model": model.state_dict(), "optim": FSDP.sharded_optim_state_dict(model, optim)}

    def set(self, model: nn.Module, optim: torch.optim.Optimizer, state: StateDict) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType

        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
            model.load_state_dict(state["model"])
            optim.load_state_dict(FSDP.flatten_sharded_optim_state_dict(state["optim"], model, optim))

"""The built-in strategies, one per (wrapper, state-dict API, storage) of the matrix."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from conformance.case import Case
from conformance.strategy.parallel import Fsdp2EpWrapper, Fsdp2TpWrapper, TpWrapper
from conformance.strategy.pipeline import PipelineFsdpWrapper, PipelineWrapper
from conformance.strategy.prefixing import PrefixingFsdp2Wrapper
from conformance.strategy.protocol import (
    ComposedStrategy,
    PreloadingStrategy,
    StateApi,
    Strategy,
    Wrapper,
)
from conformance.strategy.state_apis import (
    DistributedStateDict,
    Fsdp1StateDict,
    KnowsTheModel,
    LegacyFullOptim,
    LegacyShardedOptim,
    PlainStateDict,
    TutorialRank0Init,
)
from conformance.strategy.storage import STORAGES
from conformance.strategy.wrappers import DdpWrapper, Fsdp1Wrapper, Fsdp2Wrapper, PlainWrapper


def _fsdp1(case: Case, use_orig_params: bool) -> Fsdp1Wrapper:
    api = STATE_APIS["fsdp1"].get(case.api)
    return Fsdp1Wrapper(
        case.sharding,
        use_orig_params=use_orig_params,
        bf16=case.precision == "bf16",
        sync_module_states=getattr(api, "sync_module_states", False),
        hsdp_shape=case.hsdp_shape,
    )


def _fsdp2(case: Case, **options: object) -> Wrapper:
    """FSDP2 in the case's sharding: 1-D, HSDP, over tensor parallelism (2-D, 3-D mesh), or
    over experts sharded as DTensors (a (dp, ep) mesh)."""
    if case.sharding in ("tp", "hsdp_tp"):
        return Fsdp2TpWrapper(case.mesh_shape)
    if case.sharding == "ep":
        dp, ep = case.mesh_shape
        return Fsdp2EpWrapper((dp, ep))
    return Fsdp2Wrapper(
        hsdp=case.sharding == "hsdp",
        bf16=case.precision == "bf16",
        hsdp_shape=case.hsdp_shape,
        **options,  # type: ignore[arg-type]
    )


WRAPPERS: dict[str, Callable[[Case], Wrapper]] = {
    "plain": lambda case: PlainWrapper(),
    "ddp": lambda case: DdpWrapper(),
    "fsdp1": lambda case: _fsdp1(case, use_orig_params=False),
    "fsdp1+orig": lambda case: _fsdp1(case, use_orig_params=True),
    "fsdp2": lambda case: _fsdp2(case),
    "fsdp2+noreshard": lambda case: _fsdp2(case, reshard_after_forward=False),
    "fsdp2+offload": lambda case: _fsdp2(case, cpu_offload=True),
    "fsdp2+ac": lambda case: PrefixingFsdp2Wrapper("checkpoint"),
    "fsdp2+compile": lambda case: PrefixingFsdp2Wrapper("compile"),
    "tp": lambda case: TpWrapper(),
    "pp": lambda case: PipelineFsdpWrapper(case.mesh_shape) if case.mesh else PipelineWrapper(),  # type: ignore[arg-type]
}

DSD_APIS: dict[str, StateApi] = {
    "dsd_full": DistributedStateDict(full_state_dict=True),
    "dsd_full_offload": DistributedStateDict(full_state_dict=True, cpu_offload=True),
    "dsd_full_bcast": DistributedStateDict(full_state_dict=True, cpu_offload=True, broadcast_from_rank0=True),
    "dsd_sharded": DistributedStateDict(full_state_dict=False),
    "dsd_sharded_offload": DistributedStateDict(full_state_dict=False, cpu_offload=True),
}

# family -> API token -> implementation. Every family also takes get/set_state_dict.
STATE_APIS: dict[str, dict[str, StateApi]] = {
    "ddp": {"sd_full": PlainStateDict(), **DSD_APIS},
    "fsdp1": {
        "sd_full": Fsdp1StateDict("full"),
        "sd_full_rank0": Fsdp1StateDict("full", rank0_only=True),
        "sd_full_offload": Fsdp1StateDict("full", offload_to_cpu=True),
        "sd_full_offload_rank0": Fsdp1StateDict("full", offload_to_cpu=True, rank0_only=True),
        "sd_full_optim_offload": Fsdp1StateDict("full", optim_offload_to_cpu=True),
        "sd_sharded": Fsdp1StateDict("sharded"),
        "sd_local": Fsdp1StateDict("local"),
        "legacy_full_scatter": LegacyFullOptim("scatter"),
        "legacy_full_shard": LegacyFullOptim("shard"),
        "legacy_full_rank0_init": TutorialRank0Init(),
        "legacy_sharded": LegacyShardedOptim(),
        **DSD_APIS,
    },
    "fsdp2": dict(DSD_APIS),
    "tp": dict(DSD_APIS),  # DTensor state: get/set_state_dict is the documented path
    # a stage's own state, by the full model's names; and with the optimizer's param groups
    # keyed by parameter name (flatten_optimizer_state_dict), as torchtitan saves its stages
    "pp": {
        **DSD_APIS,
        "dsd_full_flat": DistributedStateDict(full_state_dict=True, flatten_optimizer_state_dict=True),
        "dsd_sharded_flat": DistributedStateDict(full_state_dict=False, flatten_optimizer_state_dict=True),
    },
    "plain": {"sd_full": PlainStateDict()},
}


def builtin_strategy(case: Case) -> Strategy:
    """The strategy a cell of the built-in matrix tests. A factory: Case -> Strategy."""
    try:
        wrapper = WRAPPERS[case.wrapper](case)
        api = STATE_APIS[case.family][case.api]
        storage = STORAGES[case.storage]
    except KeyError as exc:
        raise ValueError(f"no built-in strategy for {case.id}: unknown {exc}") from None
    if isinstance(api, KnowsTheModel):  # rekey_optim_state_dict takes the non-wrapped model
        api = dataclasses.replace(api, model=case.model)
    if hasattr(api, "before_wrap"):
        return PreloadingStrategy(wrapper, api, storage)
    return ComposedStrategy(wrapper, api, storage)

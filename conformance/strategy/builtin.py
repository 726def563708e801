"""The state-dict APIs of each wrapper family, by token: what a layout (conformance.layout) takes."""

from __future__ import annotations

from conformance.strategy.grad_dtype_init import GradDtypeInitFirst
from conformance.strategy.protocol import StateApi
from conformance.strategy.state_apis import (
    DistributedStateDict,
    Fsdp1StateDict,
    LegacyFullOptim,
    LegacyShardedOptim,
    PlainStateDict,
    TutorialRank0Init,
)

DSD_APIS: dict[str, StateApi] = {
    "dsd_full": DistributedStateDict(full_state_dict=True),
    "dsd_full_offload": DistributedStateDict(full_state_dict=True, cpu_offload=True),
    "dsd_full_bcast": DistributedStateDict(full_state_dict=True, cpu_offload=True, broadcast_from_rank0=True),
    "dsd_full_bcast_all": DistributedStateDict(
        full_state_dict=True, cpu_offload=True, broadcast_from_rank0=True, every_rank=True
    ),
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
    # get/set_state_dict take any module; and, where a parameter keeps its grad_dtype, with the
    # optimizer's state made in the gradients' dtype first (a workaround, GradDtypeInitFirst)
    "plain": {
        "sd_full": PlainStateDict(),
        **DSD_APIS,
        "dsd_sharded_gradinit": GradDtypeInitFirst(full_state_dict=False),
    },
}

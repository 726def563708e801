"""The built-in strategies, one per (wrapper, state-dict API, storage) of the matrix."""

from __future__ import annotations

from collections.abc import Callable

from conformance.case import Case
from conformance.strategy.protocol import ComposedStrategy, StateApi, Storage, Strategy, Wrapper
from conformance.strategy.state_apis import DistributedStateDict, Fsdp1StateDict, PlainStateDict
from conformance.strategy.storages import DcpDirectory, PerRankFiles, RankZeroFile
from conformance.strategy.wrappers import DdpWrapper, Fsdp1Wrapper, Fsdp2Wrapper

WRAPPERS: dict[str, Callable[[Case], Wrapper]] = {
    "ddp": lambda case: DdpWrapper(),
    "fsdp1": lambda case: Fsdp1Wrapper(case.sharding),
    "fsdp2": lambda case: Fsdp2Wrapper(),
}

STATE_APIS: dict[tuple[str, str], StateApi] = {
    ("ddp", "sd_full"): PlainStateDict(),
    ("fsdp1", "sd_full"): Fsdp1StateDict("full"),
    # The FSDP tutorial's recipe: offload to CPU, rank 0 only.
    ("fsdp1", "sd_full_offload"): Fsdp1StateDict("full", offload_to_cpu=True, rank0_only=True),
    ("fsdp1", "sd_sharded"): Fsdp1StateDict("sharded"),
    ("fsdp1", "sd_local"): Fsdp1StateDict("local"),
    ("fsdp2", "dsd_full"): DistributedStateDict(full_state_dict=True),
    ("fsdp2", "dsd_sharded"): DistributedStateDict(full_state_dict=False),
}

STORAGES: dict[str, Storage] = {
    "torch_save": RankZeroFile(),
    "torch_save_per_rank": PerRankFiles(),
    "dcp": DcpDirectory(),
}


def builtin_strategy(case: Case) -> Strategy:
    """The strategy a cell of the built-in matrix tests. A factory: Case -> Strategy."""
    try:
        wrapper = WRAPPERS[case.wrapper](case)
        api = STATE_APIS[(case.wrapper, case.api)]
        storage = STORAGES[case.storage]
    except KeyError as exc:
        raise ValueError(f"no built-in strategy for {case.id}: unknown {exc}") from None
    return ComposedStrategy(wrapper, api, storage)

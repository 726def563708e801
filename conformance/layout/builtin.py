"""The built-in strategies: a layout's wrapper, one of its state-dict APIs, a storage."""

from __future__ import annotations

import dataclasses

from conformance.case import Case
from conformance.layout.registry import LAYOUTS
from conformance.strategy.protocol import ComposedStrategy, PreloadingStrategy, Strategy
from conformance.strategy.state_apis import KnowsTheModel
from conformance.strategy.storage import STORAGES


def builtin_strategy(case: Case) -> Strategy:
    """The strategy a cell of the built-in matrix tests. A factory: Case -> Strategy."""
    try:
        layout = LAYOUTS[(case.wrapper, case.sharding)]
        api = layout.apis[case.api]
        storage = STORAGES[case.storage]
    except KeyError as exc:
        raise ValueError(f"no built-in strategy for {case.id}: unknown {exc}") from None
    wrapper = layout.build(case)
    if isinstance(api, KnowsTheModel):  # rekey_optim_state_dict takes the non-wrapped model
        api = dataclasses.replace(api, model=case.model)
    if hasattr(api, "before_wrap"):
        return PreloadingStrategy(wrapper, api, storage)
    return ComposedStrategy(wrapper, api, storage)

"""An optimizer that mishandles its own state, registered from outside the package like
tests/new_optimizer_plugin.py (`-p tests.broken_optimizers`): the round trip must catch it.

broken_lion: Lion whose state_dict() hands out its momentum negated, and whose load_state_dict()
takes it as is: the loaded optimizer steps with the wrong momentum, though every call succeeds."""

from __future__ import annotations

from conformance.optim.base import Optimizer
from conformance.optim.registry import register
from tests.new_optimizer_plugin import Lion


class BrokenLion(Lion):
    def state_dict(self) -> dict:  # type: ignore[override]
        saved = super().state_dict()
        # new entries: torch's state_dict() hands out the live per-parameter dicts
        saved["state"] = {k: {**entry, "exp_avg": -entry["exp_avg"]} for k, entry in saved["state"].items()}
        return saved


BROKEN_LION = register(Optimizer("broken_lion", lambda groups: BrokenLion(groups, lr=1e-3)))

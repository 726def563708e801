"""The matrix: which cells exist per profile, and which are unsupported and why.

Everything that decides whether a combination runs lives here, in tables that read like
tables. Unsupported cells stay in the matrix (and in results.json) as `unsupported`, with
their reason; they never count as passes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from conformance.case import Case

# (wrapper, sharding) -> the state-dict APIs it is checkpointed with.
WRAPPER_APIS: dict[tuple[str, str], tuple[str, ...]] = {
    ("ddp", "replicate"): ("sd_full",),
    ("fsdp1", "full_shard"): ("sd_full", "sd_full_offload", "sd_local", "sd_sharded"),
    ("fsdp2", "shard"): ("dsd_full", "dsd_sharded"),
}
STORAGES: tuple[str, ...] = ("dcp", "torch_save", "torch_save_per_rank")
OPTIMIZERS: tuple[str, ...] = ("adamw",)
MODELS: tuple[str, ...] = ("mlp",)
PRECISIONS: tuple[str, ...] = ("fp32",)


@dataclass(frozen=True)
class Profile:
    name: str
    world_sizes: tuple[int, ...]
    description: str


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("ci", (2,), "every strategy at world size 2: the slice .ci/run gates on"),
        Profile("default", (1, 2), "every strategy at world sizes 1 and 2"),
        Profile("full", (1, 2, 4), "everything, world sizes 1, 2 and 4"),
    )
}


@dataclass(frozen=True)
class Rule:
    """A cell matching every axis in `when` (a value, or a tuple of values) is unsupported."""

    when: dict[str, Any]
    reason: str

    def matches(self, case: Case) -> bool:
        axes = case.axes()
        return all(axes[k] in (v if isinstance(v, tuple) else (v,)) for k, v in self.when.items())


_ONE_FILE = (
    "a {kind} state dict holds only this rank's part; one file written by rank 0 would drop "
    "every other rank's part (use torch_save_per_rank or dcp)"
)

UNSUPPORTED: tuple[Rule, ...] = (
    Rule({"kind": "sharded", "storage": "torch_save"}, _ONE_FILE.format(kind="sharded")),
    Rule({"kind": "local", "storage": "torch_save"}, _ONE_FILE.format(kind="local")),
    Rule(
        {"storage": "dcp", "api": ("sd_full", "sd_full_offload", "sd_local", "sd_sharded")},
        "DCP loads in place into a template state dict, and the optimizer state dict of a freshly "
        "built optimizer (optimizer.state_dict, FSDP.optim_state_dict) is empty: there is nothing "
        "to load the optimizer state into. DCP goes with get/set_state_dict (dsd_*)",
    ),
)


def unsupported_reason(case: Case) -> str | None:
    for rule in UNSUPPORTED:
        if rule.matches(case):
            return rule.reason
    return None


def cases(profile: str) -> list[Case]:
    """Every cell of a profile, sorted: ids and order are the same in every run and worker."""
    try:
        world_sizes = PROFILES[profile].world_sizes
    except KeyError:
        raise ValueError(f"unknown matrix profile {profile!r}; known: {sorted(PROFILES)}") from None
    out = [
        Case(wrapper, sharding, api, storage, optimizer, model, world_size, precision)
        for (wrapper, sharding), apis in sorted(WRAPPER_APIS.items())
        for api, storage, optimizer, model, precision, world_size in itertools.product(
            sorted(apis), STORAGES, OPTIMIZERS, MODELS, PRECISIONS, world_sizes
        )
    ]
    return sorted(out, key=lambda c: c.id)

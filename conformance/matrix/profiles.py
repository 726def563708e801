"""The profiles a run picks with --matrix. Which cells each check declares per profile is the
check's own declaration (conformance.check.registry): `declares` names the declaration a
profile reads. A covering profile (conformance.matrix.covering) chooses its cells from the
supported cells of a declaration (`full` for default, its own for ci) so that every pair of
axis values is met, keeping one cell for each
feature-table answer and finding witness its declaration has."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from conformance.case import DEFAULT_PRECISION, Case
from conformance.optim.registry import gate_optimizers


@dataclass(frozen=True)
class Covering:
    """How a profile chooses its cells of a check whose cells are one configuration each:
    every pair of axis values and every (layout, API, storage) triple that a supported cell of
    `full` combines, at the least measured cost; presets: one
    cell per feature-table answer and finding witness of the profile's declaration. Transfers
    (reshard, relayout, interop) are the declaration's own."""

    strength: int = 2  # 2: every pair of values; 1: every value (and every layout/API/storage triple)
    within: str = "full"  # the declaration whose supported cells it chooses from
    keep: Callable[[Case], bool] | None = None  # cells it always runs where its declaration has them

    def says(self) -> str:
        met = "every pair of axis values" if self.strength == 2 else "every axis value"
        return (
            f"{met} and every (layout, API, storage) triple of the supported {self.within} "
            "declaration's product, at the least measured cost"
        )


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    declares: str  # the checks' declaration this profile reads (its cells, or a covering's presets)
    covering: Covering | None = None


# The reference rows: the simplest configuration of each main wrapper through its plainest APIs
# and storages, the cells the suite's own broken strategies are held to (tests/), which ci runs
# whole (the mlp in fp32 at 2 ranks, every optimizer and variant its declaration has there).
REFERENCE_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("ddp", "replicate", "sd_full", "torch_save"),
    ("fsdp1", "full_shard", "sd_full", "torch_save"),
    ("fsdp1", "full_shard", "sd_sharded", "torch_save_per_rank"),
    ("fsdp1", "full_shard", "sd_local", "torch_save_per_rank"),
    ("fsdp2", "shard", "dsd_sharded", "torch_save_per_rank"),
    ("fsdp2", "shard", "dsd_sharded", "dcp"),
)


def reference(case: Case) -> bool:
    """A built-in cell of a reference row on the mlp in fp32 at 2 ranks, with an optimizer of the
    gate (conformance.optim.registry.GATE_OPTIMIZERS, or a plugin's)."""
    return (
        not case.strategy
        and case.optimizer in gate_optimizers()
        and (case.wrapper, case.sharding, case.api, case.storage) in REFERENCE_ROWS
        and case.model == "mlp"
        and case.precision == DEFAULT_PRECISION
        and case.world_size == 2
    )


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "ci",
            "a covering of the ci declaration (the main wrappers and APIs, every optimizer, at world "
            "size 2, and each other check) with each of its answers: the slice .ci/run gates on",
            "ci",
            Covering(within="ci", keep=reference),
        ),
        Profile(
            "ci-product",
            "the ci declaration's product, every cell (the ci profile before covering)",
            "ci",
        ),
        Profile(
            "default",
            "a covering of the supported full product with each answer of the default declaration "
            "(every wrapper x API x storage at 2 ranks, HSDP and the main ones at 4, optimizers, "
            "models, bf16)",
            "default",
            Covering(),
        ),
        Profile("full", "everything at world sizes 1, 2 and 4", "full"),
        Profile(
            "default-product",
            "the default declaration's product, every cell (the default profile before covering)",
            "default",
        ),
    )
}

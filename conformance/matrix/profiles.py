"""The profiles a run picks with --matrix. Which cells each check declares per profile is the
check's own declaration (conformance.check.registry): `declares` names the declaration a
profile reads. A covering profile (conformance.matrix.covering) chooses its cells from the
supported cells of `full` so that every pair of axis values is met, keeping one cell for each
feature-table answer and finding witness its declaration has."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Covering:
    """How a profile chooses its cells of a check whose cells are one configuration each:
    every pair of axis values and every (layout, API, storage) triple that a supported cell of
    `full` combines, at the least measured cost; presets: one
    cell per feature-table answer and finding witness of the profile's declaration. Transfers
    (reshard, relayout, interop) are the declaration's own."""

    strength: int = 2  # 2: every pair of values; 1: every value (and every layout/API/storage triple)

    def says(self) -> str:
        met = "every pair of axis values" if self.strength == 2 else "every axis value"
        return (
            f"{met} and every (layout, API, storage) triple of the supported full product, "
            "at the least measured cost"
        )


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    declares: str  # the checks' declaration this profile reads (its cells, or a covering's presets)
    covering: Covering | None = None


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "ci",
            "the main wrappers and APIs, every optimizer, at world size 2, and each other check: the slice "
            ".ci/run gates on",
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

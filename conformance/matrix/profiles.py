"""The profiles a run picks with --matrix. Which cells each check has in a profile is the
check's own declaration (conformance.check.registry)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """covering: the cells of each check whose cells are one configuration each are chosen from
    its `full` product by covering (conformance.matrix.covering), with every feature-table answer
    of `default` kept; transfers and registered strategies take `default`'s cells."""

    name: str
    description: str
    covering: bool = False


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "ci",
            "the main wrappers and APIs, every optimizer, at world size 2, and each other check: the slice "
            ".ci/run gates on",
        ),
        Profile(
            "default",
            "every wrapper x API x storage at 2 ranks (HSDP and the main ones at 4), plus optimizers, models, bf16",
        ),
        Profile("full", "everything at world sizes 1, 2 and 4"),
        Profile(
            "pairs",
            "every pair of axis values any supported cell of full combines, and every (layout, API, "
            "storage) triple, with default's feature-table answers; transfers as default",
            covering=True,
        ),
    )
}

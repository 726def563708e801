"""The cells of a run: a profile's cells per check, and each registered strategy's, sorted by id."""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.case import Case, Transfer
from conformance.matrix.profiles import INTEROP_CONFIGS, PROFILES, Profile
from conformance.strategy.registry import STRATEGY_CHECKS, STRATEGY_KINDS, RegisteredStrategy, Registry

CHECKS = ("corrupt", "hygiene", "interop", "reshard", "resume", "roundtrip")


def _profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown matrix profile {name!r}; known: {sorted(PROFILES)}") from None


def cases(profile: str, check: str = "roundtrip") -> list[Case]:
    """Every cell of a profile for a check run on one configuration, sorted: ids and order are
    the same in every run and worker."""
    parts = _profile(profile).parts
    unique = {case for slice_, sizes in parts if slice_.check == check for case in slice_.cases(sizes)}
    return sorted(unique, key=lambda c: c.id)


def cells(profile: str, check: str) -> list[Case] | list[Transfer]:
    """Every cell of a profile for any check, sorted by id."""
    return transfers(profile, check) if check in ("reshard", "interop") else cases(profile, check)


def transfers(profile: str, check: str) -> list[Transfer]:
    """Every reshard or interop cell of a profile, sorted by id."""
    prof = _profile(profile)
    out: set[Transfer] = set()
    if check == "reshard":
        for slice_, pairs in prof.reshard:
            for case in slice_.cases((1,)):
                for n, m in pairs:
                    save = dataclasses.replace(case, check="roundtrip", world_size=n)
                    out.add(Transfer("reshard", save, dataclasses.replace(save, world_size=m)))
    elif check == "interop":
        for ws in prof.interop:
            configs = [Case(w, s, a, st, "adamw", "mlp", ws) for w, s, a, st in INTEROP_CONFIGS]
            out.update(Transfer("interop", save, load) for save in configs for load in configs)
    else:
        raise ValueError(f"not a transfer check: {check!r}")
    return sorted(out, key=lambda t: t.id)


def strategy_cells(strategy: RegisteredStrategy, profile: str, check: str) -> list[Case] | list[Transfer]:
    """A registered strategy's cells: the profile's wrappers, optimizers, models, precisions and
    world sizes of the check (its reshard pairs for reshard), for each of STRATEGY_KINDS, in
    the strategy's name and storage. Whether it takes each is its own declaration."""
    if check not in STRATEGY_CHECKS:
        return []

    def mine(case: Case, kind: str) -> Case:
        return dataclasses.replace(
            case, api=kind, storage=strategy.storage, strategy=strategy.name, variant=""
        )

    if check == "reshard":
        pairs = {(t.save, t.load.world_size) for t in transfers(profile, check)}
        out = {
            Transfer("reshard", mine(save, k), dataclasses.replace(mine(save, k), world_size=m))
            for save, m in pairs
            for k in STRATEGY_KINDS
        }
        return sorted(out, key=lambda t: t.id)
    return sorted(
        {mine(case, k) for case in cases(profile, check) for k in STRATEGY_KINDS}, key=lambda c: c.id
    )


def run_cells(registry: Registry, profile: str, check: str) -> list[Case] | list[Transfer]:
    """The cells of a check in a run: the built-in matrix's (unless the registry leaves it
    out), then each registered strategy's, every list sorted by id."""
    out: list[Any] = list(cells(profile, check)) if registry.builtin else []
    for _, strategy in sorted(registry.strategies.items()):
        out += strategy_cells(strategy, profile, check)
    return out

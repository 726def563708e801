"""The matrix: which cells exist per profile, and which are unsupported and why.

Everything that decides whether a combination runs lives here, in tables that read like
tables. A profile is a list of slices, each a product of axis values at some world sizes.
Unsupported cells stay in the matrix (and in results.json) as `unsupported`, with their
reason; they never count as passes.

Its parts, one job each: profiles (axes, slices, profiles), rules (unsupported cells and
refusals, with reasons), cells (the cells of a run). This face is what the suite imports.
"""

from __future__ import annotations

from conformance.matrix.cells import (
    CHECKS,
    cases,
    cells,
    run_cells,
    strategy_cells,
    transfers,
)
from conformance.matrix.profiles import (
    ALL_WRAPPERS,
    EXPERT_MODELS,
    HSDP_SHARDINGS,
    INTEROP_CONFIGS,
    MAIN_APIS,
    MAIN_WRAPPERS,
    MODELS,
    OPTIMIZERS,
    PROFILES,
    STORAGES,
    VARIANTS,
    Profile,
    Slice,
)
from conformance.matrix.rules import (
    REFUSALS,
    UNSUPPORTED,
    Rule,
    first_reason,
    refusal_reason,
    transfer_unsupported_reason,
    unsupported_reason,
)

__all__ = [
    "ALL_WRAPPERS",
    "CHECKS",
    "EXPERT_MODELS",
    "HSDP_SHARDINGS",
    "INTEROP_CONFIGS",
    "MAIN_APIS",
    "MAIN_WRAPPERS",
    "MODELS",
    "OPTIMIZERS",
    "PROFILES",
    "REFUSALS",
    "STORAGES",
    "UNSUPPORTED",
    "VARIANTS",
    "Profile",
    "Rule",
    "Slice",
    "cases",
    "cells",
    "first_reason",
    "refusal_reason",
    "run_cells",
    "strategy_cells",
    "transfer_unsupported_reason",
    "transfers",
    "unsupported_reason",
]

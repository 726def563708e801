"""The matrix: which cells exist per profile, and which are unsupported and why.

Everything that decides whether a combination runs lives here, in tables that read like
tables. Each check declares its cells per profile: slices, each a product of axis values at
some world sizes (conformance.check.registry).
Unsupported cells stay in the matrix (and in results.json) as `unsupported`, with their
reason; they never count as passes.

Its parts, one job each: profiles (their names), rules (unsupported cells and
refusals, with reasons), cells (the cells of a run). This face is what the suite imports.
"""

from __future__ import annotations

from conformance.check.interop import INTEROP_CONFIGS
from conformance.check.registry import CHECKS
from conformance.check.slices import (
    ALL_WRAPPERS,
    EXPERT_MODELS,
    HSDP_WRAPPERS,
    MAIN_APIS,
    MAIN_WRAPPERS,
    MODELS,
    STORAGES,
    Slice,
)
from conformance.matrix.cells import (
    cases,
    cells,
    registered_checks,
    run_cells,
    strategy_cells,
    transfers,
    validate,
)
from conformance.matrix.profiles import PROFILES, Profile
from conformance.matrix.rules import (
    REFUSALS,
    UNSUPPORTED,
    Rule,
    first_reason,
    refusal_reason,
    transfer_unsupported_reason,
    unsupported_by_design,
    unsupported_reason,
)
from conformance.optim.registry import OPTIMIZERS

__all__ = [
    "ALL_WRAPPERS",
    "CHECKS",
    "EXPERT_MODELS",
    "HSDP_WRAPPERS",
    "INTEROP_CONFIGS",
    "MAIN_APIS",
    "MAIN_WRAPPERS",
    "MODELS",
    "OPTIMIZERS",
    "PROFILES",
    "REFUSALS",
    "STORAGES",
    "UNSUPPORTED",
    "Profile",
    "Rule",
    "Slice",
    "cases",
    "cells",
    "first_reason",
    "refusal_reason",
    "registered_checks",
    "run_cells",
    "strategy_cells",
    "transfer_unsupported_reason",
    "transfers",
    "unsupported_by_design",
    "unsupported_reason",
    "validate",
]

"""What the plugin's modules share: the config stash keys, the results' user property, and the
properties' hypothesis profiles."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.baseline import Baseline
from conformance.strategy.registry import Registry

PROPERTY = "conformance_cell"
BASELINE_KEY = pytest.StashKey[Baseline | None]()
BACKEND_KEY = pytest.StashKey[str]()
WORLDS_KEY = pytest.StashKey[int]()  # worlds this process started
REGISTRY_KEY = pytest.StashKey[Registry]()

CI_PHASES = ("explicit", "reuse", "generate")
# Properties' hypothesis profiles (--hypothesis-profile; ci when none is given, so that a
# matrix run and its published results are the same every time). ci: derandomized, no example
# database (a replayed failure from an earlier run would change what CI sees); dev and
# thorough: random, with the database in .hypothesis/ of the working directory, as hypothesis
# keeps it, so a failure found once is tried first the next time.
HYPOTHESIS_PROFILES: dict[str, dict[str, Any]] = {
    # no shrinking in ci: a failing property would run a hundred more cells, and a crashing
    # one restart a world for each (minutes per property); dev and thorough shrink
    "ci": {"derandomize": True, "max_examples": 10, "database": None, "phases": CI_PHASES},
    "dev": {"max_examples": 25},
    "thorough": {"max_examples": 100},
}
DEFAULT_HYPOTHESIS_PROFILE = "ci"

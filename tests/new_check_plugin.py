"""A new check as a contributor writes one: a module that defines `CHECK` and registers it (here
by the plugin's import; in the package, by its line in conformance/check/registry.py). It
reuses the round trip's executor on a slice of its own, so it must pass where that passes.
Loaded with `-p tests.new_check_plugin` by tests/test_checks.py."""

from __future__ import annotations

from conformance.check import roundtrip
from conformance.check.base import CaseCells, Check, Feature
from conformance.check.registry import CHECKS
from conformance.check.slices import Slice

AGAIN = Slice("again", wrappers=(("ddp", "replicate"),), apis=("sd_full",), storages=("torch_save",))

CHECK = Check(
    name="again",
    title="Again: the round trip once more, as a check of its own",
    shape=CaseCells({"ci": ((AGAIN, (2,)),)}),
    execute=roundtrip.execute,
    features=(Feature("again", "the round trip, registered as a new check"),),
)
CHECKS[CHECK.name] = CHECK

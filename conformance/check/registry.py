"""The checks, registered in one place: the matrix, the runner, the pytest parametrisation and
the reports read this table, in this order. A new check is one module of this package that
defines `CHECK` (conformance.check.base.Check), its line here, and its test in cases/."""

from __future__ import annotations

from conformance.check import (
    corrupt,
    hygiene,
    interop,
    lifecycle,
    relayout,
    reshard,
    resume,
    roundtrip,
    template,
)
from conformance.check.base import Check

CHECKS: dict[str, Check] = {
    module.CHECK.name: module.CHECK
    for module in (roundtrip, resume, reshard, relayout, interop, hygiene, corrupt, template, lifecycle)
}

"""The matrix as pytest parameters: one test per cell of the profile, marked by its axes, and
grouped by the worlds it needs for xdist."""

from __future__ import annotations

import pytest

from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.matrix import run_cells
from conformance.plugin.shared import REGISTRY_KEY
from conformance.property import properties


def cell_fixtures() -> dict[str, str]:
    """fixture name -> the check whose cells it takes, one test per cell of the --matrix
    profile; read from the registry when asked, so a check registered by then has its tests."""
    return {check.fixture: name for name, check in CHECKS.items()}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, check in cell_fixtures().items():
        if fixture not in metafunc.fixturenames:
            continue
        params = [
            pytest.param(
                cell,
                id=cell.id,
                marks=[getattr(pytest.mark, m) for m in (cell.kind, cell.family, check)],
            )
            for cell in run_cells(
                metafunc.config.stash[REGISTRY_KEY], metafunc.config.getoption("matrix"), check
            )
        ]
        metafunc.parametrize(fixture, params)
    if "property_case" in metafunc.fixturenames:
        registry = metafunc.config.stash[REGISTRY_KEY]
        props = properties(metafunc.config.getoption("matrix"), registry)
        metafunc.parametrize(
            "property_case",
            [
                pytest.param(
                    p,
                    id=p.id,
                    marks=[
                        pytest.mark.property,
                        getattr(pytest.mark, p.base.kind),
                        getattr(pytest.mark, p.base.family),
                    ],
                )
                for p in props
            ],
        )


WORKER_GROUP_CELLS = 48  # cells of one world-size group an xdist worker takes at a time


def world_group(cell: Case | Transfer) -> str:
    """The worlds a cell needs, as a word: w2, or w1+w2 for a reshard between 1 and 2 ranks."""
    if isinstance(cell, Transfer):
        return "+".join(f"w{n}" for n in sorted({cell.save.world_size, cell.load.world_size}))
    return f"w{cell.world_size}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the cells by the worlds they need, in runs of WORKER_GROUP_CELLS: under
    `--dist loadgroup` each run goes to one xdist worker, so a worker starts the worlds of the
    groups it gets rather than every world of the matrix. xdist's default (`load`) ignores
    the groups; bench/xdist.py measures both."""
    counts: dict[str, int] = {}
    for item in items:
        cell = cell_of(item)
        if cell is None:
            continue
        group = world_group(cell)
        index = counts.get(group, 0)
        counts[group] = index + 1
        item.add_marker(pytest.mark.xdist_group(f"{group}-{index // WORKER_GROUP_CELLS}"))


def cell_of(item: pytest.Item) -> Case | Transfer | None:
    """The cell a collected test runs (None for any other test)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    cell = next((params[f] for f in cell_fixtures() if f in params), None)
    return cell if isinstance(cell, (Case, Transfer)) else None  # an empty parameter set: NOTSET

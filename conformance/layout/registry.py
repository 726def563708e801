"""The layouts, registered in one place: the matrix's slices, the rules, the wrappers, the sanity
check and the training read this table. A new layout is one module of this package that defines
`LAYOUTS` and its line here; from outside the package, `register(layout)` (a pytest plugin's
import, as tests/new_layout_plugin.py does)."""

from __future__ import annotations

from conformance.case import Case
from conformance.layout import (
    data_parallel,
    experts,
    fsdp1,
    fsdp1_tp,
    fsdp2,
    hsdp,
    pipeline,
    plain,
    tensor_parallel,
    wrapped_units,
)
from conformance.layout.base import Layout

LAYOUTS: dict[tuple[str, str], Layout] = {
    layout.key: layout
    for module in (
        plain,
        data_parallel,
        fsdp1,
        hsdp,
        fsdp2,
        wrapped_units,
        tensor_parallel,
        fsdp1_tp,
        experts,
        pipeline,
    )
    for layout in module.LAYOUTS
}


def register(layout: Layout) -> Layout:
    """Adds a layout (or replaces the one of its key); returns it."""
    LAYOUTS[layout.key] = layout
    return layout


def own_layout(wrapper: str, sharding: str) -> Layout:
    """A layout a registered strategy's framework brings itself (Supports.layouts): data parallel,
    each rank its own batches; the strategy says what a rank holds (`held`, `shard_group_size`).
    It builds no wrapper and takes no built-in API."""

    def no_wrapper(case: Case) -> object:
        raise ValueError(
            f"{wrapper} {sharding} is a registered strategy's own layout: it wraps the model itself"
        )

    return Layout(wrapper, sharding, build=no_wrapper, apis={})  # type: ignore[arg-type]


def layout_of(case: Case) -> Layout:
    """The layout of a cell (a registered strategy's own layout when the matrix has none)."""
    return LAYOUTS.get((case.wrapper, case.sharding)) or own_layout(case.wrapper, case.sharding)


def families() -> list[str]:
    """The wrapper families of every layout, sorted: each is a pytest marker."""
    return sorted({layout.family for layout in LAYOUTS.values()})

"""Property cells: hypothesis generates the model and the optimizer schedule, every example
runs as a cell in the warm worlds, and a failure shrinks to the smallest failing
configuration, which becomes the property cell's result (detail and axes) in results.json.

A property is a check (roundtrip, reshard, resume) over one strategy configuration of the
profile, e.g. `property-roundtrip-fsdp2-dsd_sharded-dcp-w2`. Its examples replace the model
and the optimizer axes of that configuration's cell with generated ones
(conformance.generated): 1 to 4 Linear layers, each dimension 1 to 33 (primes and values
below the world size included), bias on or off per layer, tied first and last layers, which
layers are FSDP units of their own; SGD, Adam or AdamW with drawn hyperparameters, 1 to 4
steps before the save, and an LR scheduler or not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.case import Case, Transfer, repro_command
from conformance.check.roundtrip import StrategyFactory
from conformance.generated import model_specs, schedules, tp_model_specs
from conformance.layout.builtin import builtin_strategy
from conformance.layout.registry import layout_of
from conformance.outcome import FAILING, RERUN_NOTE, CellResult, Outcome
from conformance.precision.registry import is_default
from conformance.strategy.registry import Registry
from conformance.strategy.storage import STORAGES

Cell = Case | Transfer
GENERATED = "generated"  # a property's model and optimizer axes


@dataclass(frozen=True)
class Property:
    """One property: a check over one configuration (its base cell from the profile, whose
    model and optimizer the examples replace)."""

    base: Cell

    @property
    def check(self) -> str:
        return self.base.check

    @property
    def tp_layouts(self) -> tuple[tuple[str, int], ...]:
        """A tensor-parallel base's (mesh, TP degree) its examples draw from (with a model
        whose plan suits the degree): every (dp, tp) mesh of FSDP2 + TP; TP alone over every
        rank. () for any other base."""
        base = self.base
        if isinstance(base, Transfer):
            return ()
        return layout_of(base).tp_degrees(base.world_size)

    @property
    def id(self) -> str:
        """property-<check>-<config>-w<N>[-to-w<M>]: the base cell's id without its model
        and optimizer (and mesh, when the examples draw it)."""
        if isinstance(self.base, Transfer):
            save = self.base.save
            return f"property-reshard-{save.config}-w{save.world_size}-to-w{self.base.load.world_size}"
        mesh = f"-mesh{self.base.mesh}" if self.base.mesh and not self.tp_layouts else ""
        return f"property-{self.check}-{self.base.config}-w{self.base.world_size}{mesh}"

    def instantiate(self, model: str, optimizer: str, mesh: str | None = None) -> Cell:
        def mine(case: Case) -> Case:
            drawn = {} if mesh is None else {"mesh": mesh}
            return dataclasses.replace(case, model=model, optimizer=optimizer, **drawn)

        if isinstance(self.base, Transfer):
            return dataclasses.replace(self.base, save=mine(self.base.save), load=mine(self.base.load))
        return mine(self.base)

    def axes(self, backend: str) -> dict[str, Any]:
        """The base cell's axes, its model and optimizer "generated" (the examples draw
        them; a failing property names its configuration in minimal_model and
        minimal_optimizer)."""
        return {
            **self.base.axes(),
            "model": GENERATED,
            "optimizer": GENERATED,
            "backend": backend,
            "check": f"property-{self.check}",
            "property": True,
        }


def _preference(cell: Cell) -> tuple[int, int, str]:
    """Which cell of a group stands for it: a representative storage (DCP) and the DSD API first."""
    case = cell.save if isinstance(cell, Transfer) else cell
    storage = STORAGES.get(case.storage)
    return (not (storage and storage.representative), not case.api.startswith("dsd"), cell.id)


def property_checks() -> tuple[str, ...]:
    """The checks the properties run (those the registry marks `properties`)."""
    from conformance.check.registry import CHECKS

    return tuple(name for name, check in CHECKS.items() if check.properties)


def properties(profile: str, registry: Registry | None = None) -> list[Property]:
    """The profile's properties: a round trip for each wrapper and state-dict kind at 2 ranks;
    resharding between 1 and 2 ranks, both ways, for each sharding family and kind; a
    resume for each family and kind; of the built-in matrix (unless the registry leaves it out)
    and of each registered strategy, over what it declares. Sorted by id (stable across runs
    and xdist workers)."""
    from conformance.matrix import run_cells, transfer_unsupported_reason, unsupported_reason
    from conformance.matrix.cells import declared_profile

    profile = declared_profile(profile)
    registry = registry or Registry()
    groups: dict[tuple[Any, ...], list[Cell]] = {}
    for check in property_checks():
        for cell in run_cells(registry, profile, check):
            owner = registry.strategy_of(cell)
            if owner is not None and (  # it declares neither this cell nor generated models
                owner.unsupported_reason(cell)
                or owner.unsupported_reason(Property(cell).instantiate(GENERATED, GENERATED))
            ):
                continue
            if isinstance(cell, Transfer):
                save = cell.save
                if (
                    not layout_of(save).property_reshards
                    or transfer_unsupported_reason(cell)
                    or {save.world_size, cell.load.world_size} != {1, 2}
                ):
                    continue
                key: tuple[Any, ...] = (cell.strategy, check, save.family, save.kind, save.world_size)
            else:
                if (
                    cell.world_size != 2
                    or not is_default(cell.precision)
                    or cell.model != "mlp"
                    or unsupported_reason(cell)
                ):
                    continue
                key = (
                    (cell.strategy, check, cell.wrapper_token, cell.kind)
                    if check == "roundtrip"
                    else (cell.strategy, check, cell.family, cell.kind)
                )
            groups.setdefault(key, []).append(cell)
    chosen = [Property(min(cells, key=_preference)) for cells in groups.values()]
    return sorted(chosen, key=lambda p: p.id)


class PropertyFailed(AssertionError):
    """An example's cell did not pass; hypothesis shrinks on it."""


@dataclass
class PropertyRun:
    """The examples of one property as they ran: (cell, result), in order. Hypothesis replays
    the minimal failing example last."""

    prop: Property
    examples: list[tuple[Cell, CellResult]] = field(default_factory=list)
    rejections: list[CellResult] = field(default_factory=list)  # skipped or unsupported examples

    @property
    def rejected(self) -> int:
        return len(self.rejections)

    def none_could_run(self, axes: dict[str, Any], exc: BaseException) -> CellResult:
        """No example ran: a skip (or unsupported) with the examples' own reason when each was
        one, never an error of the strategy; a harness-error when hypothesis gave up otherwise."""
        kinds = {r.outcome for r in self.rejections}
        if self.rejections and not self.examples and len(kinds) == 1:
            reasons = sorted({r.detail for r in self.rejections})
            detail = f"none of the {self.rejected} generated examples can run here: {reasons[0]}"
            if len(reasons) > 1:
                detail += f" (and {len(reasons) - 1} other reasons)"
            return CellResult(self.prop.id, axes, kinds.pop(), detail, 0.0)
        detail = f"no generated example could run: {exc}"
        return CellResult(self.prop.id, axes, Outcome.HARNESS_ERROR, detail, 0.0)


def run_property(
    prop: Property,
    run_cell: Callable[[Cell], CellResult],
    backend: str,
    *,
    factory: StrategyFactory = builtin_strategy,
    settings: Any = None,
) -> CellResult:
    """Run the property with the loaded hypothesis profile (or `settings`) and say how it
    ended, as one CellResult: pass with how many examples ran, or the shrunk minimal failing
    configuration with its cell id, repro command and detail."""
    from hypothesis import HealthCheck, given, reject
    from hypothesis import settings as hypothesis_settings
    from hypothesis import strategies as st
    from hypothesis.errors import Flaky, Unsatisfiable

    record = PropertyRun(prop)

    def example(data: Any) -> None:
        mesh = None
        if prop.tp_layouts:  # a mesh, then a model whose plan splits over its tp dimension
            mesh, degree = data.draw(st.sampled_from(prop.tp_layouts), label="mesh, tp degree")
            model = data.draw(tp_model_specs(degree), label="model")
        else:
            model = data.draw(model_specs(), label="model")
        schedule = data.draw(schedules(), label="optimizer schedule")
        cell = prop.instantiate(model.name, schedule.name, mesh)
        result = run_cell(cell)
        if result.outcome in (Outcome.SKIP, Outcome.UNSUPPORTED):
            record.rejections.append(result)
            reject()
        record.examples.append((cell, result))
        if result.outcome in FAILING:
            raise PropertyFailed(f"{result.outcome.value}: {cell.id}\n{result.detail}")

    example._hypothesis_internal_add_digest = prop.id.encode()  # type: ignore[attr-defined]
    base = settings or hypothesis_settings()
    test = hypothesis_settings(
        base,
        suppress_health_check=[
            *base.suppress_health_check,
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
        ],
    )(given(st.data())(example))
    axes = prop.axes(backend)
    try:
        test()
    except Unsatisfiable as exc:
        return record.none_could_run(axes, exc)
    except PropertyFailed:
        from hypothesis import Phase

        shrunk = Phase.shrink in base.phases
        return _falsified(prop, record, {**axes, "shrunk": shrunk}, shrunk)
    except Flaky as exc:  # an example failed, then passed when hypothesis ran it again
        return _flaky(prop, record, {**axes, "shrunk": False}, exc)
    duration = sum(r.duration_s for _, r in record.examples)
    passed = [cell for cell, r in record.examples if r.outcome is Outcome.PASS]
    if not passed:  # never a vacuous pass; and not the strategy's doing
        return CellResult(prop.id, axes, Outcome.HARNESS_ERROR, "no example ran to a pass", duration)
    models = sorted({(c.save if isinstance(c, Transfer) else c).model for c in passed})
    reruns = [c.id for c, r in record.examples if r.hung_in_a_warm_world]
    rerun_note = (
        f"; {len(reruns)} of them {RERUN_NOTE} and passed in a fresh one, e.g. {reruns[0]}" if reruns else ""
    )
    detail = (
        f"{len(passed)} generated configurations, each bitwise equal ({record.rejected} rejected as "
        f"unsupported{rerun_note}); e.g. {', '.join(models[:3])}"
    )
    return CellResult(prop.id, {**axes, "examples": len(passed)}, Outcome.PASS, detail, duration)


def _flaky(prop: Property, record: PropertyRun, axes: dict[str, Any], exc: BaseException) -> CellResult:
    """A configuration that failed once and passed when run again: the failure is the result
    (never a pass), with both runs named."""
    failing = [(c, r) for c, r in record.examples if r.outcome in FAILING]
    if not failing:  # hypothesis saw flakiness of its own (e.g. a draw that changed): an error
        detail = f"hypothesis reported the property flaky: {type(exc).__name__}: {exc}"
        duration = sum(r.duration_s for _, r in record.examples)
        return CellResult(prop.id, axes, Outcome.HARNESS_ERROR, detail, duration)
    cell, result = failing[0]
    again = [r.outcome.value for c, r in record.examples if c.id == cell.id and r is not result]
    headline = (
        f"flaky configuration: {{config}}: {result.outcome.value} on its first run, then "
        f"{', '.join(again) or 'another outcome'} when hypothesis ran it again (not shrunk)"
    )
    return _failing_example(prop, record, axes, cell, result, headline)


def _falsified(prop: Property, record: PropertyRun, axes: dict[str, Any], shrunk: bool) -> CellResult:
    failing = [(c, r) for c, r in record.examples if r.outcome in FAILING]
    cell, result = failing[-1]  # the last failing example hypothesis ran: its shrunk minimum
    # Hypothesis runs the reported example once more at the end (and shrinking may try a
    # configuration twice): count configurations, not runs.
    tried = {c.id for c, _ in record.examples}
    failed = {c.id for c, _ in failing}
    note = (
        "" if shrunk else "; not shrunk: this hypothesis profile has no shrink phase, dev or thorough shrinks"
    )
    headline = (
        f"{'minimal' if shrunk else 'first'} failing configuration: {{config}} "
        f"({len(failed)} of {len(tried)} configurations tried failed{note})"
    )
    return _failing_example(prop, record, axes, cell, result, headline)


def _failing_example(
    prop: Property, record: PropertyRun, axes: dict[str, Any], cell: Cell, result: CellResult, headline: str
) -> CellResult:
    """The property's result from one failing example: `headline` (its {config} the example's
    model and optimizer), the cell, its repro command and its detail; minimal_* axes."""

    case = cell.save if isinstance(cell, Transfer) else cell
    detail = (
        headline.format(config=f"model {case.model}, optimizer {case.optimizer}") + "\n"
        f"  cell: {cell.id}\n"
        f"  repro: {repro_command(cell.id, cell.check, case.world_size)}\n"
        f"{result.outcome.value}: {result.detail}"
    )
    out_axes = {
        **axes,
        "minimal_model": case.model,
        "minimal_optimizer": case.optimizer,
        "minimal_cell": cell.id,
    }
    return CellResult(
        prop.id,
        out_axes,
        result.outcome,
        detail,
        sum(r.duration_s for _, r in record.examples),
        observed=result.observed,
    )

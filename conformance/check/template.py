"""The template check: a storage that loads in place (DCP) loads into the template state dict it is
given, and users hand it templates that do not match what was saved. Each variant shapes the
template the fresh model and optimizer give (ComposedStrategy.load_template) as users write it, and
the load goes on as the strategy's own:

- fresh_optimizer: the template as a freshly built optimizer gives it, unchanged: what users write
  first. FSDP.optim_state_dict and optimizer.state_dict() of an optimizer that never stepped hold no
  state (the round trip's rule sends these APIs to get/set_state_dict, which initialise the state
  before they build the template); a load into it can only load the parameter groups;
- missing_module: the model part without one module's keys (a template of a model that lost a
  layer);
- extra_keys: the model part with a key the checkpoint does not hold;
- other_dtype: the model part's floating tensors in bfloat16 (a template built from a model cast
  after the save).

The verdict: a load that raises passes (it refused a template it cannot fill); one that goes through
and leaves every value bitwise equal passes; one that goes through with other values fails, and the
comparison says how bad (a state that stayed fresh loses it, a cast corrupts it). What goes wrong
while the harness shapes the template is a harness-error, never the strategy's outcome.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from conformance.case import Case
from conformance.check.base import CaseCells, Check, Feature, Under
from conformance.check.phases import PhaseError, Phases, observed_of
from conformance.check.slices import MAIN_WRAPPERS, Slice
from conformance.check.transfer import LoadSpec, load_phase, load_verdict, saved
from conformance.outcome import Outcome
from conformance.strategy.protocol import ComposedStrategy, StateDict, Strategy
from conformance.strategy.storage import Storage
from conformance.strategy.under_test import LOADING_CALLS

Shape = Callable[[StateDict], StateDict]


def _unchanged(template: StateDict) -> StateDict:
    return template


def _last_module(keys: list[str]) -> str:
    """The prefix (with its dot) of the module that owns the last dotted key in order."""
    dotted = sorted(k for k in keys if "." in k)
    if not dotted:
        raise ValueError(f"no module's key in the model template: {sorted(keys)}")
    return dotted[-1].rsplit(".", 1)[0] + "."


def _without_module(template: StateDict) -> StateDict:
    model = template["model"]
    prefix = _last_module(list(model))
    shaped = {**template, "model": {k: v for k, v in model.items() if not k.startswith(prefix)}}
    state = template.get("optim", {}).get("state") if isinstance(template.get("optim"), dict) else None
    if isinstance(state, dict):  # keyed by parameter name (FSDP.optim_state_dict, get_state_dict)
        kept = {k: v for k, v in state.items() if not (isinstance(k, str) and k.startswith(prefix))}
        shaped["optim"] = {**template["optim"], "state": kept}
    return shaped


def _with_extra_key(template: StateDict) -> StateDict:
    model = dict(template["model"])
    if "conformance_extra" in model:
        raise ValueError("the model template already has the extra key")
    model["conformance_extra"] = torch.zeros(3)
    return {**template, "model": model}


def _bf16(template: StateDict) -> StateDict:
    model = dict(template["model"])
    cast = [k for k, v in model.items() if getattr(v, "is_floating_point", lambda: False)()]
    if not cast:
        raise ValueError(f"no floating tensor in the model template to cast: {sorted(model)}")
    for key in cast:
        model[key] = model[key].to(torch.bfloat16)
    return {**template, "model": model}


@dataclass(frozen=True)
class Template:
    """A variant of the check: how users shape the template, and what it means."""

    name: str
    meaning: str
    shape: Shape


TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template(
            "fresh_optimizer", "the template of a freshly built optimizer, as the API gives it", _unchanged
        ),
        Template("missing_module", "the model template without one module's keys", _without_module),
        Template("extra_keys", "the model template with a key the checkpoint lacks", _with_extra_key),
        Template("other_dtype", "the model template's floating tensors in bfloat16", _bf16),
    )
}


@dataclass(frozen=True)
class Shaped:
    """The factory of the strategy whose load takes the variant's template (picklable: it goes to
    the ranks): a composed strategy (the built-in one, or a test's subclass of it) with its
    template shaped."""

    factory: Callable[[Case], Strategy]
    variant: str

    def __call__(self, case: Case) -> Strategy:
        built = self.factory(case)
        if not isinstance(built, ComposedStrategy):
            raise TypeError(
                f"{case.id}: the template check shapes a composed strategy's template, got {built!r}"
            )
        return dataclasses.replace(built, shape_template=TEMPLATES[self.variant].shape)


def execute(phases: Phases, case: Case, under: Under) -> tuple[Outcome, str]:
    directory = str(phases.scratch())
    plain = dataclasses.replace(case, check="roundtrip", variant="")
    try:
        written = saved(phases, plain, directory, under.factory)
    except PhaseError as exc:
        return exc.outcome, exc.detail
    problems = [p for value in written for p in value["problems"]]
    template = TEMPLATES[case.variant]
    spec = LoadSpec(plain, directory, written[0]["expected"], Shaped(under.factory, case.variant))
    try:
        loaded = phases.run("load", case.world_size, load_phase, spec)
    except PhaseError as exc:
        if not problems:
            refused = phases.refusal(exc, LOADING_CALLS, f"the load into {template.meaning} raised")
            if refused:
                return refused
        return exc.outcome, exc.detail
    phases.observed += observed_of(written, loaded)
    return load_verdict(problems, loaded, f"loaded into {template.meaning}")


def _templates_of(storage: Storage) -> tuple[str, ...]:
    return tuple(TEMPLATES) if storage.loads_in_place else ()


TEMPLATE_SLICE = Slice(
    "load templates",
    MAIN_WRAPPERS,
    ("dsd_full", "dsd_sharded", "sd_full", "sd_sharded"),
    storages=("dcp",),
)

# ci: the pitfall's API (FSDP1's sharded optimizer state dict) and the documented one (DSD), on
# FSDP1 and FSDP2 (the ci slice's time budget)
TEMPLATE_CI_SLICE = dataclasses.replace(
    TEMPLATE_SLICE,
    name="load templates (ci)",
    wrappers=(("fsdp1", "full_shard"), ("fsdp2", "shard")),
    apis=("dsd_sharded", "sd_sharded"),
)

CHECK = Check(
    name="template",
    title="Load templates: a load into a template unlike the checkpoint raises or loads every value",
    shape=CaseCells(
        {
            "ci": ((TEMPLATE_CI_SLICE, (2,)),),
            "default": ((TEMPLATE_SLICE, (2,)),),
            "full": ((TEMPLATE_SLICE, (1, 2, 4)),),
        },
        variants=_templates_of,
    ),
    execute=execute,
    features=(
        Feature("templates", "a load into a template unlike the checkpoint raises or loads every value"),
    ),
    own_templates=True,
)

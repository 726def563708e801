"""Which cells are unsupported by design, and which transfers must refuse to load, with reasons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.case import Case, Transfer
from conformance.check.registry import CHECKS
from conformance.check.slices import (
    EXPERT_MODELS,
    IN_PLACE_STORAGES,
    ONE_FILE_STORAGES,
    PER_RANK_STORAGES,
)
from conformance.construction.base import Materialize
from conformance.construction.registry import skips_initialisation
from conformance.layout.registry import layout_of
from conformance.models import MODELS, RESHAPED
from conformance.optim.registry import refuses_low_precision_grads, several_optimizers, steps_with_closure
from conformance.precision.registry import scales_loss, sets_grad_dtype
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.registry import RegisteredStrategy
from conformance.strategy.storage import STORAGES as STORAGE_OBJECTS


@dataclass(frozen=True)
class Rule:
    """A cell matching every axis in `when` (a value, or a tuple of values) is unsupported."""

    when: dict[str, Any]
    reason: str

    def matches(self, axes: dict[str, Any]) -> bool:
        """Whether a cell with these axes (Case.axes, Transfer.axes) matches."""
        for key, condition in self.when.items():  # noqa: SIM110 (a loop: every cell meets every rule, all() of a generator costs more)
            if not _holds(condition, axes[key]):
                return False
        return True


def _holds(condition: Any, value: Any) -> bool:
    """A rule's condition on one axis: a value, a tuple of values, or a predicate of the value
    (an axis object's property: `mixed` for a precision, `in_param_groups` for an optimizer)."""
    if isinstance(condition, tuple):
        return value in condition
    if callable(condition):
        return bool(condition(value))
    return value == condition


def _template_rules_apply(check: str) -> bool:
    """Whether a check's cells load into the template the API gives (every check but one that
    shapes its templates itself, the pitfalls included: Check.own_templates)."""
    return check not in CHECKS or not CHECKS[check].own_templates


_ONE_FILE = (
    "a {kind} state dict holds only this rank's part; one file written by rank 0 would drop "
    "every other rank's part (use torch_save_per_rank or dcp)"
)
RANK0_ONLY_APIS = (
    "dsd_full_bcast",
    "dsd_full_bcast_all",
    "dsd_full_offload",
    "legacy_full_rank0_init",
    "legacy_full_scatter",
    "legacy_full_shard",
    "sd_full_offload_rank0",
    "sd_full_rank0",
)

NO_RESHAPED_TWIN = tuple(sorted(n for n in MODELS if n not in RESHAPED))

UNSUPPORTED: tuple[Rule, ...] = (
    *(  # a storage this installation cannot provide, with what is missing
        Rule({"storage": name}, f"{name}: {storage.unavailable}")
        for name, storage in STORAGE_OBJECTS.items()
        if getattr(storage, "unavailable", None)
    ),
    Rule(
        {"check": "corrupt", "variant": "other_model", "model": NO_RESHAPED_TWIN},
        "the model has no twin with its parameter names and other shapes (conformance.models.RESHAPED) "
        "to load the checkpoint into",
    ),
    Rule({"kind": "sharded", "storage": ONE_FILE_STORAGES}, _ONE_FILE.format(kind="sharded")),
    Rule({"kind": "local", "storage": ONE_FILE_STORAGES}, _ONE_FILE.format(kind="local")),
    Rule(
        {
            "storage": IN_PLACE_STORAGES,
            "api": tuple(a for a in STATE_APIS["fsdp1"] if not a.startswith("dsd_")),
            "check": _template_rules_apply,
        },
        "DCP loads in place into a template state dict, and the optimizer state dict of a freshly "
        "built optimizer (optimizer.state_dict, FSDP.optim_state_dict) is empty: there is nothing "
        "to load the optimizer state into. DCP goes with get/set_state_dict (dsd_*); what a load into "
        "that empty template does is the template check's fresh_optimizer cells",
    ),
    Rule(
        {"storage": IN_PLACE_STORAGES, "api": ("dsd_full_bcast", "dsd_full_bcast_all", "dsd_full_offload")},
        "get_state_dict with full_state_dict and cpu_offload gives the state to rank 0 only (as documented): "
        "a DCP directory saved collectively from it would lack what the other ranks never had",
    ),
    Rule(
        {"storage": PER_RANK_STORAGES, "api": RANK0_ONLY_APIS},
        "only rank 0 holds the state (rank0_only, full_optim_state_dict, or full_state_dict with "
        "cpu_offload): the other ranks' files would be empty",
    ),
    Rule(
        {"precision": scales_loss, "optimizer": steps_with_closure},
        "GradScaler.step does not take a closure (it raises 'Closure use is not currently supported "
        "if GradScaler is enabled'): an optimizer that re-evaluates the loss (LBFGS) cannot scale it",
    ),
    Rule(
        {"precision": sets_grad_dtype, "optimizer": refuses_low_precision_grads},
        "the optimizer cannot step fp32 parameters with bf16 gradients (Adam's family, and RMSprop with "
        "centered=True as the matrix configures it, raise 'expected dtype float for `end` but got dtype "
        "c10::BFloat16': a lerp of the fp32 state towards the gradient)",
    ),
    Rule(
        {"model": EXPERT_MODELS, "world_size": 1},
        "expert parallelism needs at least 2 ranks: one rank holds every expert",
    ),
    Rule(
        {"model": EXPERT_MODELS, "storage": ONE_FILE_STORAGES},
        "each rank holds its own expert (expert parallelism): one file written by rank 0 holds rank "
        "0's expert only",
    ),
)


# What every layout whose wrapper replaces or buckets the parameters refuses (Layout.keeps_grad_dtype).
DROPS_GRAD_DTYPE = (
    {"precision": sets_grad_dtype},
    "only the plain module is declared to keep a parameter's grad_dtype (Layout.keeps_grad_dtype). Seen "
    "on torch 2.13 at 2 ranks: DDP's reducer raises 'Expected Float, got BFloat16', FSDP1 with "
    "use_orig_params raises 'attempting to assign a gradient with dtype float to a tensor with grad_dtype "
    "BFloat16'; FSDP1's flat parameters, FSDP2's re-created ones and tensor parallelism's DTensor "
    "parameters drop it (the gradients stay fp32); the other layouts were not tried",
)


# A wrapper that materialises a meta-device module itself runs the module's own initialisation
WRAPPER_INITIALISES = (
    {"construction": skips_initialisation},
    "the wrapper materialises a module on the meta device itself (to_empty() and reset_parameters() "
    "while wrapping, as documented): no path under it skips the model's own initialisation",
)


def layout_rules(case: Case) -> tuple[Rule, ...]:
    """What the cell's layout refuses by design (conformance.layout: a registered layout's too)."""
    layout = layout_of(case)
    own = layout.refusals + (() if layout.keeps_grad_dtype else (DROPS_GRAD_DTYPE,))
    if layout.materialize is Materialize.BY_WRAPPER:
        own += (WRAPPER_INITIALISES,)
    return _own_rules(case, own)


ONE_OPTIMIZER_API = (
    "the state-dict API's optimizer functions take one optimizer and give one state dict, which the "
    "composed strategy saves as its one optimizer entry; the matrix calls an API once per optimizer "
    "only where it is built to (StateApi.takes_optimizers: optimizer.state_dict, FSDP.optim_state_dict, "
    "get/set_state_dict, which take an iterable of optimizers)"
)


def api_rules(case: Case) -> tuple[Rule, ...]:
    """What the cell's state-dict API refuses: several optimizers, unless it takes them."""
    api = layout_of(case).apis.get(case.api)
    if api is None or getattr(api, "takes_optimizers", False):
        return ()
    return (Rule({"api": case.api, "optimizer": several_optimizers}, ONE_OPTIMIZER_API),)


def _own_rules(case: Case, refusals: Any) -> tuple[Rule, ...]:
    """A layout's refusals as rules, matched only with its own wrapper and sharding."""
    return tuple(
        Rule({"wrapper": case.wrapper, "sharding": case.sharding, **when}, reason)
        for when, reason in refusals
    )


def first_reason(rules: tuple[Rule, ...], cell: Case | Transfer) -> str | None:
    """The reason of the first rule the cell matches, or None."""
    axes = cell.axes()  # once per cell: a cell meets every rule of the matrix
    return next((rule.reason for rule in rules if rule.matches(axes)), None)


def unsupported_reason(case: Case) -> str | None:
    """The reason of the first rule the cell matches: the matrix's, then its layout's."""
    return first_reason(UNSUPPORTED + layout_rules(case) + api_rules(case), case)


# A transfer whose axes (Transfer.axes(): the save case's, and load_* for the other side)
# match cannot load by design: its load must raise.
REFUSALS: tuple[Rule, ...] = (
    Rule(
        {"check": "reshard", "kind": "local"},
        "LOCAL_STATE_DICT holds each rank's flat shard as it is: it belongs to one world size",
    ),
    *(  # another storage format than the saving one wrote, unless the loading one reads it
        Rule(
            {"check": "interop", "storage": saved, "load_storage": loaded},
            "the loading configuration reads another storage format than the saving one wrote",
        )
        for saved in STORAGE_OBJECTS
        for loaded, storage in STORAGE_OBJECTS.items()
        if loaded != saved and saved not in getattr(storage, "reads", ())
    ),
)


def storage_refusals(storage: Any) -> tuple[Rule, ...]:
    """What a storage refuses by design when a checkpoint it wrote is loaded in another world
    (its `reshard_refusals`: a built-in storage's, or a registered strategy's OwnFormat)."""
    name = getattr(storage, "name", None)
    return tuple(
        Rule({"check": "reshard", "storage": name, **axes}, reason)
        for axes, reason in getattr(storage, "reshard_refusals", ())
    )


def refusal_reason(transfer: Transfer, storage: Any) -> str | None:
    """Why the transfer's load must raise, or None. storage: the object that wrote the saving
    side's checkpoint (a built-in storage, or a registered strategy's own)."""
    saving = _own_rules(transfer.save, layout_of(transfer.save).load_refusals)
    return first_reason(saving + REFUSALS + storage_refusals(storage), transfer)


def transfer_unsupported_reason(transfer: Transfer) -> str | None:
    """Unsupported when either side is (the round trip's rules), with that side named."""
    for side, case in (("save", transfer.save), ("load", transfer.load)):
        reason = unsupported_reason(case)
        if reason:
            return f"{side} side ({case.config}): {reason}"
    return None


def unsupported_by_design(cell: Case | Transfer, owner: RegisteredStrategy | None = None) -> str | None:
    """Why a cell is unsupported by design, or None: its registered strategy's declaration
    (`owner`) first, then the matrix's rules. Whether it can run here (a
    skip) is asked only after: a cell unsupported by design says so wherever it runs, and the
    runner and a covering run's folded cells (matrix.cells) agree on it."""
    reason = owner.unsupported_reason(cell) if owner is not None else None
    if reason:
        return reason
    return transfer_unsupported_reason(cell) if isinstance(cell, Transfer) else unsupported_reason(cell)

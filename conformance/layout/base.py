"""A parallel layout: how a cell's model is spread over the ranks of its world. One object per
(wrapper, sharding) value of the matrix owns everything that depends on it: the wrapper it
builds, the state-dict APIs its family takes, the meshes a world holds for it, which data-parallel
replica's batches a rank trains on, over how many ranks one copy of the parameters is spread,
which parameters it must split, which combinations it refuses by design and why, and whether it
needs an accelerator. A new layout is one module of this package and its line in
conformance/layout/registry.py (or `register` from outside the package)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.case import Case
from conformance.construction.base import Materialize
from conformance.strategy.protocol import StateApi, Wrapper
from conformance.strategy.storage import STORAGES

# (axes a cell matches, the reason it is unsupported): matched like conformance.matrix.rules.Rule,
# the layout's own (wrapper, sharding) added.
Refusal = tuple[Mapping[str, Any], str]


# optimizer.state_dict() (the sd_full API of DDP and the plain module) through DCP
KEYED_BY_INDEX: Refusal = (
    {
        "storage": tuple(n for n, s in STORAGES.items() if getattr(s, "saves_with_dcp", False)),
        "api": "sd_full",
    },
    "optimizer.state_dict() is keyed by parameter index, and dcp.save takes a state dict keyed by "
    "strings (as documented): the index keys come back as '0', '1', ..., which "
    "optimizer.load_state_dict files under no parameter. DCP goes with get/set_state_dict (dsd_*), "
    "whose optimizer state is keyed by name",
)

# A transfer saved with optimizer.state_dict() and loaded by a storage that converts it to DCP
# and loads in place (Storage.reads): matched on Transfer.axes(), its load must raise.
KEYED_BY_INDEX_CONVERTED: Refusal = (
    {
        "check": "interop",
        "api": "sd_full",
        "load_storage": tuple(n for n, s in STORAGES.items() if s.loads_in_place and getattr(s, "reads", ())),
    },
    "the saved optimizer is keyed by parameter index; the conversion to DCP keeps it so, and the "
    "load into get_state_dict's template, keyed by name, finds none of its keys (the documented "
    "path rekeys first: FSDP.rekey_optim_state_dict, or get_state_dict's FQN-keyed dicts)",
)


@dataclass(frozen=True)
class Layout:
    """A layout of the matrix. Subclasses override the methods whose answer is not the
    default's: a 1-D data-parallel layout where each rank trains on its own batches."""

    wrapper: str  # the case's wrapper axis: family[+option]
    sharding: str
    build: Callable[[Case], Wrapper]  # the wrapper a cell of this layout wraps its model with
    apis: Mapping[str, StateApi]  # the state-dict APIs of its family, by token
    replicated: bool = False  # every rank holds a whole copy of the parameters
    sanity_checked: bool = True  # False: each rank trains alone (no wrapper): nothing to check
    flat_shards: bool = False  # each rank's parameters are a shard of a flat parameter (FSDP1)
    property_reshards: bool = True  # a resharding property of this layout says something
    needs_accelerator: str = ""  # why it cannot run on the CPU ("" : it can)
    # the parameters keep a `grad_dtype` set before wrapping (no wrapper replaces or buckets them)
    keeps_grad_dtype: bool = False
    refusals: tuple[Refusal, ...] = ()
    # where a fresh model built on the meta device gets its storage (conformance.construction)
    materialize: Materialize = Materialize.AFTER_WRAP
    # transfers saved in this layout whose load must raise by design (matched on Transfer.axes())
    load_refusals: tuple[Refusal, ...] = ()
    # a registered strategy's own layout (Supports.layouts): the matrix declarations whose cells it
    # takes (conformance.matrix.profiles: "ci", "default", "full"); None: every one
    declarations: tuple[str, ...] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.wrapper, self.sharding

    @property
    def family(self) -> str:
        """The wrapper without its option (ddp, fsdp1, fsdp2, tp, pp, plain): a pytest marker."""
        return self.wrapper.split("+", 1)[0]

    def meshes(self, world_size: int) -> tuple[str, ...]:
        """The mesh axis values of a world of this size ("": no mesh axis)."""
        return ("",)

    def mesh_shape(self, case: Case) -> tuple[int, ...]:
        """The device mesh: the mesh axis's sizes, else all ranks in one dimension."""
        return case_mesh(case)

    def data_rank(self, case: Case, rank: int) -> int:
        """Which data-parallel replica's batches a rank trains on."""
        return rank

    def group_size(self, case: Case, world_size: int) -> int:
        """Over how many ranks one copy of the parameters is spread (1: replicated)."""
        return 1 if self.replicated else world_size

    def split_params(self, model_cls: type) -> tuple[str, dict[str, str]]:
        """(mesh dimension, {parameter: what splits it}) this layout must shard over that
        dimension of its mesh on every rank ("", {}: none)."""
        return "", {}

    def ranks_per_stage(self, case: Case) -> int | None:
        """A pipeline's ranks per stage (rank = stage * n + d), None for no pipeline."""
        return None

    def tp_degrees(self, world_size: int) -> tuple[tuple[str, int], ...]:
        """(mesh, tensor-parallel degree) a property's examples may draw; () for none."""
        return ()


def case_mesh(case: Case) -> tuple[int, ...]:
    """The mesh axis's sizes, else all ranks in one dimension."""
    return case.mesh_sizes or (case.world_size,)


def tp_plan_params(model_cls: type) -> tuple[str, dict[str, str]]:
    """The weights a model's tensor-parallel plan (tp_plan) splits column- or row-wise."""
    if not hasattr(model_cls, "tp_plan"):
        return "tp", {}
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = model_cls.tp_plan()  # type: ignore[attr-defined]
    return "tp", {  # SequenceParallel replicates a norm's weight; PrepareModuleInput has none
        f"{m}.weight": f"the plan shards it ({type(style).__name__})"
        for m, style in plan.items()
        if isinstance(style, (ColwiseParallel, RowwiseParallel))
    }


def models_without(attribute: str) -> tuple[str, ...]:
    """The fixed models that declare no `attribute` (tp_plan, ep_params, keep_stage): a layout
    that needs it refuses them."""
    from conformance.models import MODELS

    return tuple(sorted(n for n, c in MODELS.items() if not hasattr(c, attribute)))


def expert_models() -> tuple[str, ...]:
    """The models whose experts live on expert-parallel sub-groups (each rank its own)."""
    from conformance.models import MODELS

    return tuple(sorted(n for n, c in MODELS.items() if getattr(c, "expert_parallel", False)))

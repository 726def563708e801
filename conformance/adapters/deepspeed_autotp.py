"""DeepSpeed's automatic tensor parallelism for training (AutoTP, deepspeed 0.19.8) as layouts of
the DeepSpeed rows (conformance/adapters/deepspeed.py): the engine splits the model's linear
layers over a tensor-parallel group, and save_checkpoint writes one model file and one optimizer
file per tensor-parallel rank.

Called as its tutorial trains (https://www.deepspeed.ai/tutorials/autotp-training/, "AutoTP
training can be enabled entirely through the DeepSpeed config. When `tensor_parallel` is set in
the config, `deepspeed.initialize(...)` applies AutoTP sharding during engine initialization,
so the training loop itself does not change"), with the "Custom Layer Specifications" it gives a
model no preset covers: `"tensor_parallel": {"autotp_size": N, "partition_config":
{"use_default_specs": false, "layer_specs": [{"patterns": [...], "partition_type": "column" |
"row"}]}}`, here the model's own tensor-parallel plan (tp_plan: column-wise and row-wise
layers, the plan the built-in TP layouts apply). Without one, `deepspeed.initialize` refuses a
model outside its presets ("Not able to determine model policy automatically").

Two layouts: `autotp`, every rank one tensor-parallel group (autotp_size = world size, ZeRO-1
over a data-parallel group of one rank: the ZeRO optimizer the tutorial pairs AutoTP with, here
partitioning nothing); `autotp2_zero1`, groups of 2 tensor-parallel ranks and ZeRO-1 over the
data-parallel groups across them (a 2-D mesh at 4 ranks). The ranks of one tensor-parallel
group train on the same batches, as DeepSpeed's own AutoTP tests feed them (a broadcast batch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from conformance.adapters.deepspeed_view import ZeroView
from conformance.case import Case
from conformance.layout.base import Layout, models_without
from conformance.layout.registry import register

WRAPPER = "deepspeed"
# sharding -> the tensor-parallel degree (None: every rank of the world)
TP_DEGREE: dict[str, int | None] = {"autotp": None, "autotp2_zero1": 2}
ZERO_STAGE = 1
# DeepSpeed's record of how AutoTP split a parameter (module_inject/layers.py), which its
# universal conversion reads: partition_dim, the logical (whole) shape, replicated
META = "ds_autotp_universal_checkpoint_meta"

NO_TP_PLAN = (
    {"model": models_without("tp_plan")},
    "the model declares no tensor-parallel plan (tp_plan), and AutoTP finds no preset for it "
    "(deepspeed.initialize: 'Not able to determine model policy automatically'): which of its "
    "layers are split column- or row-wise is the model's choice",
)
# The OwnFormat of the DeepSpeed rows names a rank's files by ZeRO's data-parallel rank
# (zero_pp_rank_<r>); under AutoTP a tensor-parallel rank's are mp_rank_<r>: the damage would
# delete another rank's or none
NO_RANK_FILES = (
    {"check": "corrupt", "variant": "missing_shard"},
    "the DeepSpeed rows name one rank's files by its ZeRO data-parallel rank (zero_pp_rank_<r>); "
    "under AutoTP a tensor-parallel rank's files are mp_rank_<r>: not yet a cell",
)


def tp_degree(case: Case) -> int:
    """The cell's tensor-parallel degree (autotp_size)."""
    degree = TP_DEGREE[case.sharding]
    return case.world_size if degree is None else min(degree, case.world_size)


@dataclass(frozen=True)
class AutoTpLayout(Layout):
    """AutoTP's layout: one copy of the parameters spread over a tensor-parallel group of
    consecutive ranks (DeepSpeed's groups: rank = dp * tp + t), every rank of a group the same
    batches. Its framework wraps the model (the strategy builds no built-in wrapper)."""

    degree: int | None = None  # None: every rank

    def _tp(self, world_size: int) -> int:
        return world_size if self.degree is None else min(self.degree, world_size)

    def data_rank(self, case: Case, rank: int) -> int:
        return rank // self._tp(case.world_size)

    def group_size(self, case: Case, world_size: int) -> int:
        return self._tp(world_size)


def _own_wrapper(case: Case) -> object:
    raise ValueError(f"{case.wrapper} {case.sharding} is DeepSpeed's own layout: its engine wraps the model")


# 2 x ZeRO-1 is a 2-D mesh at 4 ranks; below, its data-parallel group is one rank and its cells are
# autotp's: it keeps the default optimizer at 2 ranks (a reshard's side to and from 4), nothing at 1
AT_TWO = (
    "below 4 ranks the data-parallel group across its tensor-parallel groups of 2 is one rank: the cell "
    "is the autotp layout's (kept at 2 ranks with the default optimizer, a reshard's side)"
)
NOT_2D = (
    ({"world_size": 2, "optimizer": ("adam", "adamw+groups", "adamw+sched", "sgd")}, AT_TWO),
    ({"world_size": 2, "check": ("corrupt", "lifecycle")}, AT_TWO),
    ({"world_size": 1}, "at one rank it splits nothing: the autotp layout's cells load and save at one rank"),
)
# the default and full profiles' cells; none in ci (the gate's declaration, its baseline unchanged)
DECLARATIONS = ("default", "full")
REFUSALS = {"autotp": (), "autotp2_zero1": NOT_2D}

LAYOUTS = tuple(
    register(
        AutoTpLayout(
            WRAPPER,
            sharding,
            build=_own_wrapper,  # type: ignore[arg-type]
            apis={},
            refusals=(NO_TP_PLAN, NO_RANK_FILES, *REFUSALS[sharding]),
            degree=degree,
            declarations=DECLARATIONS,
        )
    )
    for sharding, degree in TP_DEGREE.items()
)


def is_autotp(case: Case) -> bool:
    return case.sharding in TP_DEGREE


def tensor_parallel_config(case: Case) -> dict[str, Any]:
    """The "tensor_parallel" section of the cell's DeepSpeed config: autotp_size and the
    model's plan as AutoTP's layer specs (column-wise: "column", row-wise: "row"); {} for a
    cell of another layout."""
    if not is_autotp(case):
        return {}
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from conformance.models import model_class

    plan = model_class(case.model).tp_plan()  # type: ignore[attr-defined]
    kinds = {ColwiseParallel: "column", RowwiseParallel: "row"}
    specs = [
        {"patterns": [rf"^{re.escape(module)}\.weight$"], "partition_type": kinds[type(style)]}
        for module, style in plan.items()
        if type(style) in kinds
    ]
    return {
        "tensor_parallel": {
            "autotp_size": tp_degree(case),
            "partition_config": {"use_default_specs": False, "layer_specs": specs},
        }
    }


def cached_groups(groups: Any) -> tuple[Any, ...]:
    """The process groups AutoTP's engine caches in deepspeed.utils.groups (None where none)."""
    return groups._TENSOR_MODEL_PARALLEL_GROUP, groups._MODEL_PARALLEL_GROUP, groups._DATA_PARALLEL_GROUP


def reset_mode() -> None:
    """What deepspeed.initialize leaves process-wide after an AutoTP engine (its training mode,
    tp_model_init's arguments), reset as DeepSpeed's own AutoTP tests reset it between engines
    (test_autotp_training.py: reset_tp_model_init_state)."""
    import deepspeed
    from deepspeed.module_inject import set_autotp_mode

    deepspeed._TP_MODEL_INIT_ARGS = None
    set_autotp_mode(training=False)


def carries_its_own_info(engine: Any) -> bool:
    """Whether the engine writes its own universal-checkpoint info (AutoTP over more than one
    rank: how each parameter is split), which a client_state of the same key would replace."""
    from deepspeed.checkpoint import UNIVERSAL_CHECKPOINT_INFO

    return getattr(engine.module, UNIVERSAL_CHECKPOINT_INFO, None) is not None


def check_groups(case: Case, rank: int, model: nn.Module) -> None:
    """After deepspeed.initialize: AutoTP split each weight of the plan as its spec says (a
    spec that matched nothing leaves the layer whole, and a cell would say nothing of it), the
    tensor-parallel group DeepSpeed built is the one the layout feeds the same batches
    (consecutive ranks), and this process has the layout registered (else each rank of a group
    would train on batches of its own)."""
    if not is_autotp(case) or tp_degree(case) == 1:  # one rank: AutoTP splits nothing, builds no group
        return
    import torch.distributed as dist

    from conformance.layout.registry import layout_of

    if not isinstance(layout_of(case), AutoTpLayout):
        raise RuntimeError(f"the layout {case.wrapper} {case.sharding} is not registered in this process")
    params = dict(model.named_parameters())
    for spec in tensor_parallel_config(case)["tensor_parallel"]["partition_config"]["layer_specs"]:
        names = [n for n in params if re.match(spec["patterns"][0], n)]
        split = [getattr(params[n], META, {}).get("partition_type") for n in names]
        if not names or split != [spec["partition_type"]] * len(names):
            raise RuntimeError(
                f"AutoTP did not split {spec['patterns'][0]} {spec['partition_type']}-wise: {split}"
            )
    group, size = _tp_group()
    first = rank // size * size
    ranks = dist.get_process_group_ranks(group)
    if size != tp_degree(case) or ranks != list(range(first, first + size)):
        raise RuntimeError(
            f"DeepSpeed's tensor-parallel group is ranks {ranks}, not {tp_degree(case)} from {first}"
        )


def by_name(model: nn.Module, groups: list[list[str]]) -> list[list[nn.Parameter]]:
    """The cell's param groups over the model's parameters after deepspeed.initialize: AutoTP
    replaces the layers it splits, and their parameters with their shards."""
    params = dict(model.named_parameters())
    return [[params[name] for name in group] for group in groups]


def _tp_group() -> Any:
    from deepspeed.utils import groups

    return groups.get_tensor_model_parallel_group(), groups.get_tensor_model_parallel_world_size()


def _whole(param: nn.Parameter, local: torch.Tensor) -> torch.Tensor:
    """A parameter's whole value of this rank's piece of it (the parameter, its fp32 master or
    an optimizer state entry, each of the parameter's local shape): the pieces of the
    tensor-parallel group concatenated along the dimension DeepSpeed split it on, as its
    universal conversion merges them; a parameter AutoTP replicated or left alone is whole."""
    import torch.distributed as dist

    meta = getattr(param, META, None)
    if not meta or meta.get("replicated") or meta.get("partition_dim") is None:
        return local
    if meta.get("sub_param_shape"):
        raise NotImplementedError(
            f"a fused parameter of sub-parameters ({meta['sub_param_shape']}) is not read yet"
        )
    group, size = _tp_group()
    pieces: list[Any] = [None] * size
    dist.all_gather_object(pieces, local.detach().cpu(), group=group)
    whole = torch.cat(pieces, dim=meta["partition_dim"]).to(local.device)
    if tuple(whole.shape) != tuple(meta["logical_shape"]):
        raise ValueError(f"the tensor-parallel pieces make {tuple(whole.shape)}, not {meta['logical_shape']}")
    return whole


@dataclass
class AutoTpView(ZeroView):
    """The ZeRO view (its fp32 masters and optimizer state of this rank's shards, whole over the
    data-parallel group) with each shard made whole over the tensor-parallel group."""

    def parameters_by_name(self) -> dict[str, torch.Tensor]:
        params = dict(self.model.named_parameters())
        return {name: _whole(params[name], value) for name, value in super().parameters_by_name().items()}

    @property
    def state(self) -> dict[Any, dict[str, Any]]:
        return {
            param: {
                k: _whole(param, v) if torch.is_tensor(v) and v.dim() > 0 else v for k, v in entries.items()
            }
            for param, entries in super().state.items()
        }

"""The matrix's axes and slices: products of axis values at some world sizes, the cells a check
declares per profile (conformance.check.base)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conformance.case import DEFAULT_CONSTRUCTION, Case
from conformance.construction.registry import is_default as is_default_construction
from conformance.layout.registry import LAYOUTS
from conformance.optim.registry import DEFAULT_OPTIMIZER
from conformance.strategy.storage import STORAGES as STORAGE_OBJECTS

# The data-parallel layouts (conformance.layout): on one mesh dimension, and HSDP's 2-D ones.
ONE_D_WRAPPERS: tuple[tuple[str, str], ...] = (
    ("ddp", "replicate"),
    *((w, s) for w in ("fsdp1", "fsdp1+orig") for s in ("full_shard", "no_shard", "shard_grad_op")),
    *((w, "shard") for w in ("fsdp2", "fsdp2+noreshard")),
)
HSDP_WRAPPERS: tuple[tuple[str, str], ...] = (
    *((w, s) for w in ("fsdp1", "fsdp1+orig") for s in ("hybrid_shard", "hybrid_shard_zero2")),
    *((w, "hsdp") for w in ("fsdp2", "fsdp2+noreshard")),
)
# The parallel layouts beyond data parallelism (conformance.strategy.parallel, .pipeline,
# .prefixing): tensor parallelism alone; FSDP2 over it on a (dp, tp) mesh; FSDP2 over wrap
# units that activation checkpointing or torch.compile wrapped; FSDP2 with CPUOffloadPolicy;
# pipeline stages. HSDP + TP on a (replicate, shard, tp) mesh is in the full profile.
TP_WRAPPERS: tuple[tuple[str, str], ...] = (("tp", "tp"), ("fsdp2", "tp"))
PREFIXING_WRAPPERS: tuple[tuple[str, str], ...] = (("fsdp2+ac", "shard"), ("fsdp2+compile", "shard"))
LAYOUT_WRAPPERS: tuple[tuple[str, str], ...] = (
    *TP_WRAPPERS,
    *PREFIXING_WRAPPERS,
    ("fsdp2+offload", "shard"),
    ("pp", "stages"),
    ("pp", "interleaved"),
)
HSDP_TP_WRAPPERS: tuple[tuple[str, str], ...] = (("fsdp2", "hsdp_tp"),)
# FSDP1 over tensor parallelism on a (dp, tp) mesh (conformance.layout.fsdp1_tp).
FSDP1_TP_WRAPPERS: tuple[tuple[str, str], ...] = (("fsdp1", "tp"), ("fsdp1+orig", "tp"))
# Pipeline stages with FSDP2 inside each, on a (stages, dp) mesh of 4 ranks.
PP_FSDP_WRAPPERS: tuple[tuple[str, str], ...] = (("pp", "fsdp"),)
# Experts as DTensors over a (dp, ep) mesh (torchtitan's MoE layout), on the moe_dtensor model.
EP_WRAPPERS: tuple[tuple[str, str], ...] = (("fsdp2", "ep"),)
DSD_ONLY_APIS: tuple[str, ...] = ("dsd_full", "dsd_sharded")

# (wrapper, sharding): every wrapper configuration of the matrix.
ALL_WRAPPERS: tuple[tuple[str, str], ...] = tuple(sorted(ONE_D_WRAPPERS + HSDP_WRAPPERS))
MAIN_WRAPPERS: tuple[tuple[str, str], ...] = (
    ("ddp", "replicate"),
    ("fsdp1", "full_shard"),
    ("fsdp1+orig", "full_shard"),
    ("fsdp2", "shard"),
)
STORAGES: tuple[str, ...] = tuple(sorted(STORAGE_OBJECTS))
# The storages by what they are (conformance.strategy.storage), for the rules of the matrix.
ONE_FILE_STORAGES = tuple(n for n in STORAGES if STORAGE_OBJECTS[n].one_file_by_rank0)
PER_RANK_STORAGES = tuple(n for n in STORAGES if STORAGE_OBJECTS[n].per_rank)
IN_PLACE_STORAGES = tuple(n for n in STORAGES if STORAGE_OBJECTS[n].loads_in_place)
MODELS: tuple[str, ...] = (
    "bn_frozen",
    "frozen_idle",
    "mlp",
    "mlp_nonpersistent",
    "mlp_int_buffer",
    "mlp_scalar",
    "mlp_scalar_param",
    "tied_transformer",
)
# Each feature of mlp_scalar on a model of its own: in the full declaration (default's covering
# meets every pair of them), not in the slices whose every row answers a column in default.
ONE_FEATURE_MODELS: tuple[str, ...] = ("mlp_int_buffer", "mlp_scalar_param")
# Both layouts of experts on expert-parallel sub-groups: every rank's expert under one name
# (moe, as fairscale and DeepSpeed do), and each under its own name (moe_named, DCP's advice).
EXPERT_MODELS = ("moe", "moe_named")
MAIN_APIS: tuple[str, ...] = ("dsd_full", "dsd_sharded", "sd_full", "sd_local", "sd_sharded")


Values = tuple[str, ...] | Callable[[], tuple[str, ...]]


def _values(values: Values) -> tuple[str, ...]:
    return values() if callable(values) else values


@dataclass(frozen=True)
class Slice:
    """A product of axis values. apis None: every API the wrapper's family has."""

    name: str
    wrappers: tuple[tuple[str, str], ...]
    apis: tuple[str, ...] | None = None
    storages: tuple[str, ...] = STORAGES
    # an axis's values: a tuple, or a function of the registry read when the cells are made (every
    # registered optimizer, every mixed precision: a plugin's value joins the slice)
    optimizers: Values = (DEFAULT_OPTIMIZER,)
    models: tuple[str, ...] = ("mlp",)
    precisions: Values = ("fp32",)
    kinds: tuple[str, ...] | None = None  # only APIs of these state-dict kinds
    # how the fresh model is built (conformance.construction); a function of the registry like optimizers
    constructions: Values = (DEFAULT_CONSTRUCTION,)

    def cases(self, world_sizes: tuple[int, ...], check: str = "roundtrip") -> list[Case]:
        return list(self.product(world_sizes, check))

    def product(self, world_sizes: tuple[int, ...], check: str = "roundtrip") -> tuple[Case, ...]:
        """The cells, made once per process for the same values: the axes' values as they are
        now (a registry's, read here) and the layout objects registered now."""
        layouts = tuple((w, s, Same(LAYOUTS[(w, s)])) for w, s in self.wrappers)
        values = (
            self.storages,
            _values(self.optimizers),
            self.models,
            _values(self.precisions),
            _values(self.constructions),
        )
        return _product(layouts, self.apis, values, self.kinds, world_sizes, check)


@dataclass(frozen=True, eq=False)
class Same:
    """An object as a key of a cache: the same object, not an equal one (a layout holds dicts,
    so has no hash of its value; a product is large). The cache keeps it alive, so its id is
    never another's."""

    obj: Any

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.obj is self.obj


@functools.lru_cache(maxsize=4096)
def _product(
    layouts: tuple[tuple[str, str, Same], ...],
    only_apis: tuple[str, ...] | None,
    values: tuple[tuple[str, ...], ...],
    kinds: tuple[str, ...] | None,
    world_sizes: tuple[int, ...],
    check: str,
) -> tuple[Case, ...]:
    out = []
    for wrapper, sharding, registered in layouts:
        layout = registered.obj
        apis = [a for a in sorted(layout.apis) if only_apis is None or a in only_apis]
        for api, (storage, optimizer, model, precision, construction), ws in itertools.product(
            apis, itertools.product(*values), world_sizes
        ):
            case = Case(
                wrapper,
                sharding,
                api,
                storage,
                optimizer,
                model,
                ws,
                precision,
                check,
                construction=construction,
            )
            if kinds is None or case.kind in kinds:
                out.extend(dataclasses.replace(case, mesh=mesh) for mesh in layout.meshes(ws))
    return tuple(out)


def configurations(parts: Parts, check: str) -> tuple[Case, ...]:
    """One cell of each configuration of a profile's parts, whatever its API, storage and
    variant (what a registered strategy's cell keeps of a built-in one, check.base.mine): a
    large declaration has millions of cells and few of these."""
    return _configurations(tuple(Same(slice_.product(sizes, check)) for slice_, sizes in parts))


@functools.lru_cache(maxsize=256)
def _configurations(products: tuple[Same, ...]) -> tuple[Case, ...]:
    first: dict[tuple[Any, ...], Case] = {}
    for product in products:
        for c in product.obj:
            if not is_default_construction(c.construction):
                continue  # a registered strategy's wrap gets the constructor's model: no such axis yet
            first.setdefault(
                (c.wrapper, c.sharding, c.optimizer, c.model, c.world_size, c.precision, c.mesh), c
            )
    return tuple(first.values())


# A profile's part of a check: slices, each at some world sizes (or reshard pairs).
Parts = tuple[tuple[Slice, tuple[int, ...]], ...]
PairParts = tuple[tuple[Slice, tuple[tuple[int, int], ...]], ...]

EVERY_WRAPPER_AND_API = Slice("every wrapper x API x storage", ALL_WRAPPERS)
MAIN_SLICE = Slice("main wrappers x main APIs", MAIN_WRAPPERS, MAIN_APIS)

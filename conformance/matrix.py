"""The matrix: which cells exist per profile, and which are unsupported and why.

Everything that decides whether a combination runs lives here, in tables that read like
tables. A profile is a list of slices, each a product of axis values at some world sizes.
Unsupported cells stay in the matrix (and in results.json) as `unsupported`, with their
reason; they never count as passes.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

from conformance.case import Case, Transfer
from conformance.strategy.builtin import STATE_APIS
from conformance.strategy.registry import STRATEGY_CHECKS, STRATEGY_KINDS, RegisteredStrategy, Registry
from conformance.strategy.storage import STORAGES as STORAGE_OBJECTS

FSDP1_SHARDINGS = ("full_shard", "hybrid_shard", "hybrid_shard_zero2", "no_shard", "shard_grad_op")
FSDP2_SHARDINGS = ("hsdp", "shard")

# (wrapper, sharding): every wrapper configuration of the matrix.
ALL_WRAPPERS: tuple[tuple[str, str], ...] = (
    ("ddp", "replicate"),
    *((w, s) for w in ("fsdp1", "fsdp1+orig") for s in FSDP1_SHARDINGS),
    *((w, s) for w in ("fsdp2", "fsdp2+noreshard") for s in FSDP2_SHARDINGS),
)
MAIN_WRAPPERS: tuple[tuple[str, str], ...] = (
    ("ddp", "replicate"),
    ("fsdp1", "full_shard"),
    ("fsdp1+orig", "full_shard"),
    ("fsdp2", "shard"),
)
STORAGES: tuple[str, ...] = tuple(sorted(STORAGE_OBJECTS))
# The storages by what they are (conformance.strategy.storage), for the rules below.
ONE_FILE_STORAGES = tuple(n for n in STORAGES if STORAGE_OBJECTS[n].one_file_by_rank0)
PER_RANK_STORAGES = tuple(n for n in STORAGES if STORAGE_OBJECTS[n].per_rank)
IN_PLACE_STORAGES = tuple(n for n in STORAGES if STORAGE_OBJECTS[n].loads_in_place)
OPTIMIZERS: tuple[str, ...] = ("adam", "adamw", "adamw+groups", "adamw+sched", "sgd")
MODELS: tuple[str, ...] = ("bn_frozen", "frozen_idle", "mlp", "tied_transformer")
MAIN_APIS: tuple[str, ...] = ("dsd_full", "dsd_sharded", "sd_full", "sd_local", "sd_sharded")


@dataclass(frozen=True)
class Slice:
    """A product of axis values. apis None: every API the wrapper's family has."""

    name: str
    wrappers: tuple[tuple[str, str], ...]
    apis: tuple[str, ...] | None = None
    storages: tuple[str, ...] = STORAGES
    optimizers: tuple[str, ...] = ("adamw",)
    models: tuple[str, ...] = ("mlp",)
    precisions: tuple[str, ...] = ("fp32",)
    check: str = "roundtrip"
    kinds: tuple[str, ...] | None = None  # only APIs of these state-dict kinds

    def cases(self, world_sizes: tuple[int, ...]) -> list[Case]:
        out = []
        for wrapper, sharding in self.wrappers:
            family_apis = sorted(STATE_APIS[wrapper.split("+")[0]])
            apis = [a for a in family_apis if self.apis is None or a in self.apis]
            for api, storage, optimizer, model, precision, ws in itertools.product(
                apis, self.storages, self.optimizers, self.models, self.precisions, world_sizes
            ):
                case = Case(wrapper, sharding, api, storage, optimizer, model, ws, precision, self.check)
                if self.kinds is not None and case.kind not in self.kinds:
                    continue
                for variant in VARIANTS.get((self.check, storage), ("",)):
                    out.append(dataclasses.replace(case, variant=variant))
        return out


# What a check varies per storage: the corruptions of a corrupt cell.
VARIANTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("corrupt", name): storage.damage for name, storage in STORAGE_OBJECTS.items()
}


HSDP_SHARDINGS = ("hsdp", "hybrid_shard", "hybrid_shard_zero2")
EVERY_WRAPPER_AND_API = Slice("every wrapper x API x storage", ALL_WRAPPERS)
FLAT_WRAPPERS_AND_APIS = Slice(
    "every 1-D wrapper x API x storage", tuple(w for w in ALL_WRAPPERS if w[1] not in HSDP_SHARDINGS)
)
HSDP_WRAPPERS_AND_APIS = Slice(
    "HSDP x API x storage", tuple(w for w in ALL_WRAPPERS if w[1] in HSDP_SHARDINGS)
)
MAIN_SLICE = Slice("main wrappers x main APIs", MAIN_WRAPPERS, MAIN_APIS)
OPTIMIZER_SLICE = Slice(
    "optimizers", MAIN_WRAPPERS, ("dsd_sharded", "sd_full", "sd_sharded"), optimizers=OPTIMIZERS
)
MODEL_SLICE = Slice(
    "models", MAIN_WRAPPERS, ("dsd_full", "dsd_sharded", "sd_full", "sd_sharded"), models=MODELS
)
# The expert-parallelism recipe: experts sharded on sub-groups, the rest on the world. Its
# seed row is fsdp1_full_shard-sd_sharded-torch_save_per_rank-adamw-moe (SHARDED_STATE_DICT,
# one file per rank).
# Both layouts: every rank's expert under one name (moe, as fairscale and DeepSpeed do), and
# each expert under its own name (moe_named, what DCP's maintainers advise).
EXPERT_MODELS = ("moe", "moe_named")
MOE_SLICE = Slice(
    "mixture of experts on expert-parallel sub-groups",
    (("fsdp1", "full_shard"), ("fsdp1+orig", "full_shard"), ("fsdp2", "shard")),
    models=EXPERT_MODELS,
)
PRECISION_SLICE = Slice(
    "bf16 mixed precision",
    MAIN_WRAPPERS,
    ("dsd_full", "dsd_sharded", "sd_full", "sd_sharded"),
    precisions=("bf16",),
)


# FSDP.optim_state_dict with the optimizer's state offloaded (its default) against without
# (sd_full): on CPU, offloading hands back exp_avg equal to exp_avg_sq under use_orig_params.
OPTIM_OFFLOAD_SLICE = Slice(
    "FSDP1 optimizer-state offload",
    (("fsdp1", "full_shard"), ("fsdp1+orig", "full_shard")),
    ("sd_full", "sd_full_optim_offload"),
    storages=("torch_save",),
)


RESUME_SLICE = Slice("resume", MAIN_WRAPPERS, MAIN_APIS, optimizers=("adamw+sched",), check="resume")
# a frozen layer in the optimizer and a never-stepped one: what a resume must carry, at 2 ranks
RESUME_IDLE_SLICE = dataclasses.replace(
    RESUME_SLICE, apis=("dsd_sharded", "sd_full"), models=("frozen_idle",)
)
HYGIENE_SLICE = Slice(
    "key hygiene", MAIN_WRAPPERS, precisions=("bf16", "fp32"), kinds=("full",), check="hygiene"
)
HYGIENE_CI_SLICE = dataclasses.replace(HYGIENE_SLICE, apis=("dsd_full", "sd_full", "sd_full_rank0"))
CORRUPT_SLICE = Slice(
    "bad checkpoints",
    (("ddp", "replicate"), ("fsdp1", "full_shard"), ("fsdp2", "shard")),
    ("dsd_sharded", "sd_full", "sd_sharded"),
    check="corrupt",
)
RESHARD_SLICE = Slice("resharding", MAIN_WRAPPERS, MAIN_APIS, check="reshard")
RESHARD_PAIRS: tuple[tuple[int, int], ...] = ((1, 2), (2, 1), (2, 4), (4, 2))
# The interop grid: configurations people move checkpoints between (wrapper, sharding, api, storage).
INTEROP_CONFIGS: tuple[tuple[str, str, str, str], ...] = (
    ("ddp", "replicate", "dsd_sharded", "dcp"),
    ("ddp", "replicate", "sd_full", "torch_save"),
    ("fsdp1", "full_shard", "dsd_sharded", "dcp"),
    ("fsdp1", "full_shard", "sd_full", "torch_save"),
    ("fsdp1", "full_shard", "sd_sharded", "torch_save_per_rank"),
    ("fsdp2", "shard", "dsd_full", "torch_save"),
    ("fsdp2", "shard", "dsd_sharded", "dcp"),
    ("plain", "none", "sd_full", "torch_save"),
)


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    parts: tuple[tuple[Slice, tuple[int, ...]], ...]  # round trip, resume, hygiene, corrupt
    reshard: tuple[tuple[Slice, tuple[tuple[int, int], ...]], ...] = ()
    interop: tuple[int, ...] = ()  # world sizes of the interop grid


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "ci",
            "the main wrappers and APIs, every optimizer, at world size 2, and each other check: the slice "
            ".ci/run gates on",
            (
                (MAIN_SLICE, (2,)),
                (OPTIMIZER_SLICE, (2,)),
                (OPTIM_OFFLOAD_SLICE, (2,)),
                (RESUME_SLICE, (2,)),
                (RESUME_IDLE_SLICE, (2,)),
                (HYGIENE_CI_SLICE, (2,)),
                (CORRUPT_SLICE, (2,)),
            ),
            reshard=((RESHARD_SLICE, ((1, 2), (2, 1))),),
            interop=(2,),
        ),
        Profile(
            "default",
            "every wrapper x API x storage at 2 ranks (HSDP and the main ones at 4), plus optimizers, models, bf16",
            (
                (FLAT_WRAPPERS_AND_APIS, (2,)),
                (MAIN_SLICE, (4,)),
                (HSDP_WRAPPERS_AND_APIS, (4,)),
                (OPTIMIZER_SLICE, (1, 2)),
                (MODEL_SLICE, (2,)),
                (MOE_SLICE, (4,)),  # the recipe is at 4 ranks; 2 ranks are in full
                (PRECISION_SLICE, (2,)),
                (RESUME_SLICE, (2,)),
                (RESUME_IDLE_SLICE, (2,)),
                (HYGIENE_CI_SLICE, (2,)),
                (CORRUPT_SLICE, (2,)),
            ),
            reshard=((RESHARD_SLICE, RESHARD_PAIRS),),
            interop=(2,),
        ),
        Profile(
            "full",
            "everything at world sizes 1, 2 and 4",
            (
                (EVERY_WRAPPER_AND_API, (1, 2, 4)),
                (OPTIMIZER_SLICE, (1, 2, 4)),
                (MODEL_SLICE, (1, 2, 4)),
                (MOE_SLICE, (1, 2, 4)),
                (PRECISION_SLICE, (1, 2, 4)),
                (RESUME_SLICE, (1, 2, 4)),
                (RESUME_IDLE_SLICE, (1, 2, 4)),
                (HYGIENE_SLICE, (1, 2, 4)),
                (CORRUPT_SLICE, (1, 2, 4)),
            ),
            reshard=((RESHARD_SLICE, RESHARD_PAIRS),),
            interop=(1, 2, 4),
        ),
    )
}


@dataclass(frozen=True)
class Rule:
    """A cell matching every axis in `when` (a value, or a tuple of values) is unsupported."""

    when: dict[str, Any]
    reason: str

    def matches(self, case: Case | Transfer) -> bool:
        axes = case.axes()
        return all(axes[k] in (v if isinstance(v, tuple) else (v,)) for k, v in self.when.items())


_ONE_FILE = (
    "a {kind} state dict holds only this rank's part; one file written by rank 0 would drop "
    "every other rank's part (use torch_save_per_rank or dcp)"
)
RANK0_ONLY_APIS = (
    "dsd_full_bcast",
    "dsd_full_offload",
    "legacy_full_rank0_init",
    "legacy_full_scatter",
    "legacy_full_shard",
    "sd_full_offload_rank0",
    "sd_full_rank0",
)

UNSUPPORTED: tuple[Rule, ...] = (
    Rule({"kind": "sharded", "storage": ONE_FILE_STORAGES}, _ONE_FILE.format(kind="sharded")),
    Rule({"kind": "local", "storage": ONE_FILE_STORAGES}, _ONE_FILE.format(kind="local")),
    Rule(
        {
            "storage": IN_PLACE_STORAGES,
            "api": tuple(a for a in STATE_APIS["fsdp1"] if not a.startswith("dsd_")),
        },
        "DCP loads in place into a template state dict, and the optimizer state dict of a freshly "
        "built optimizer (optimizer.state_dict, FSDP.optim_state_dict) is empty: there is nothing "
        "to load the optimizer state into. DCP goes with get/set_state_dict (dsd_*)",
    ),
    Rule(
        {"storage": IN_PLACE_STORAGES, "api": ("dsd_full_bcast", "dsd_full_offload")},
        "get_state_dict with full_state_dict and cpu_offload gives the state to rank 0 only (as documented): "
        "a DCP directory saved collectively from it would lack what the other ranks never had",
    ),
    Rule(
        {"storage": PER_RANK_STORAGES, "api": RANK0_ONLY_APIS},
        "only rank 0 holds the state (rank0_only, full_optim_state_dict, or full_state_dict with "
        "cpu_offload): the other ranks' files would be empty",
    ),
    Rule(
        {"sharding": HSDP_SHARDINGS, "world_size": (1, 2, 3)},
        "HSDP needs a (replicate, shard) mesh of at least 2 x 2 ranks",
    ),
    Rule(
        {"sharding": ("hybrid_shard", "hybrid_shard_zero2"), "api": "sd_local"},
        "FSDP1 refuses LOCAL_STATE_DICT with a DeviceMesh (HSDP): 'DeviceMesh is not compatible with "
        "LOCAL_STATE_DICT', by design",
    ),
    Rule(
        {"wrapper": "fsdp1", "optimizer": "adamw+groups"},
        "FSDP1 without use_orig_params gives the optimizer one flat parameter per unit: weights and "
        "biases cannot go in separate param groups",
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
    Rule(
        {"model": EXPERT_MODELS, "family": "ddp"},
        "DDP all-reduces every parameter over the whole world: experts held by some ranks only need "
        "their own groups",
    ),
    Rule(
        {"model": EXPERT_MODELS, "sharding": HSDP_SHARDINGS},
        "expert parallelism on an HSDP mesh is not built into the suite yet",
    ),
    Rule(
        {"family": "ddp", "precision": "bf16"},
        "DDP has no mixed-precision setting: autocast leaves the fp32 parameters, and so the checkpoint, unchanged",
    ),
)


def first_reason(rules: tuple[Rule, ...], cell: Case | Transfer) -> str | None:
    """The reason of the first rule the cell matches, or None."""
    return next((rule.reason for rule in rules if rule.matches(cell)), None)


def unsupported_reason(case: Case) -> str | None:
    return first_reason(UNSUPPORTED, case)


CHECKS = ("corrupt", "hygiene", "interop", "reshard", "resume", "roundtrip")


def _profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown matrix profile {name!r}; known: {sorted(PROFILES)}") from None


def cases(profile: str, check: str = "roundtrip") -> list[Case]:
    """Every cell of a profile for a check run on one configuration, sorted: ids and order are
    the same in every run and worker."""
    parts = _profile(profile).parts
    unique = {case for slice_, sizes in parts if slice_.check == check for case in slice_.cases(sizes)}
    return sorted(unique, key=lambda c: c.id)


def cells(profile: str, check: str) -> list[Case] | list[Transfer]:
    """Every cell of a profile for any check, sorted by id."""
    return transfers(profile, check) if check in ("reshard", "interop") else cases(profile, check)


def transfers(profile: str, check: str) -> list[Transfer]:
    """Every reshard or interop cell of a profile, sorted by id."""
    prof = _profile(profile)
    out: set[Transfer] = set()
    if check == "reshard":
        for slice_, pairs in prof.reshard:
            for case in slice_.cases((1,)):
                for n, m in pairs:
                    save = dataclasses.replace(case, check="roundtrip", world_size=n)
                    out.add(Transfer("reshard", save, dataclasses.replace(save, world_size=m)))
    elif check == "interop":
        for ws in prof.interop:
            configs = [Case(w, s, a, st, "adamw", "mlp", ws) for w, s, a, st in INTEROP_CONFIGS]
            out.update(Transfer("interop", save, load) for save in configs for load in configs)
    else:
        raise ValueError(f"not a transfer check: {check!r}")
    return sorted(out, key=lambda t: t.id)


# A transfer whose axes (Transfer.axes(): the save case's, and load_* for the other side)
# match cannot load by design: its load must raise.
REFUSALS: tuple[Rule, ...] = (
    Rule(
        {"check": "reshard", "kind": "local"},
        "LOCAL_STATE_DICT holds each rank's flat shard as it is: it belongs to one world size",
    ),
    *(  # what each storage refuses by design (conformance.strategy.storage)
        Rule({"check": "reshard", "storage": name, **axes}, reason)
        for name, storage in STORAGE_OBJECTS.items()
        for axes, reason in storage.reshard_refusals
    ),
    Rule(
        {"check": "interop", "storage_change": "yes"},
        "the loading configuration reads another storage format than the saving one wrote",
    ),
)


def refusal_reason(transfer: Transfer) -> str | None:
    return first_reason(REFUSALS, transfer)


def transfer_unsupported_reason(transfer: Transfer) -> str | None:
    """Unsupported when either side is (the round trip's rules), with that side named."""
    for side, case in (("save", transfer.save), ("load", transfer.load)):
        reason = unsupported_reason(case)
        if reason:
            return f"{side} side ({case.config}): {reason}"
    return None


def strategy_cells(strategy: RegisteredStrategy, profile: str, check: str) -> list[Case] | list[Transfer]:
    """A registered strategy's cells: the profile's wrappers, optimizers, models, precisions and
    world sizes of the check (its reshard pairs for reshard), for each of STRATEGY_KINDS, in
    the strategy's name and storage. Whether it takes each is its own declaration."""
    if check not in STRATEGY_CHECKS:
        return []

    def mine(case: Case, kind: str) -> Case:
        return dataclasses.replace(
            case, api=kind, storage=strategy.storage, strategy=strategy.name, variant=""
        )

    if check == "reshard":
        pairs = {(t.save, t.load.world_size) for t in transfers(profile, check)}
        out = {
            Transfer("reshard", mine(save, k), dataclasses.replace(mine(save, k), world_size=m))
            for save, m in pairs
            for k in STRATEGY_KINDS
        }
        return sorted(out, key=lambda t: t.id)
    return sorted(
        {mine(case, k) for case in cases(profile, check) for k in STRATEGY_KINDS}, key=lambda c: c.id
    )


def run_cells(registry: Registry, profile: str, check: str) -> list[Case] | list[Transfer]:
    """The cells of a check in a run: the built-in matrix's (unless the registry leaves it
    out), then each registered strategy's, every list sorted by id."""
    out: list[Any] = list(cells(profile, check)) if registry.builtin else []
    for _, strategy in sorted(registry.strategies.items()):
        out += strategy_cells(strategy, profile, check)
    return out

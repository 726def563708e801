"""The matrix's axes, slices and profiles: which cells exist, per profile."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from conformance.case import Case
from conformance.strategy.builtin import STATE_APIS
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

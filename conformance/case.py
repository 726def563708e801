"""The case record: one cell of the conformance matrix, as a frozen, picklable value."""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, field, fields

# The state-dict kind of every API token. The kind is a word of every id, so that
# `pytest -k sharded` selects exactly the sharded cells.
API_KINDS: dict[str, str] = {
    # module.state_dict() (under FSDP1's state_dict_type) + FSDP.optim_state_dict
    "sd_full": "full",  # FULL_STATE_DICT, rank0_only=False, offload_to_cpu=False
    "sd_full_rank0": "full",  # rank0_only=True
    "sd_full_offload": "full",  # offload_to_cpu=True
    "sd_full_offload_rank0": "full",  # both: the FSDP tutorial's recipe
    # the optimizer's state offloaded only (FullOptimStateDictConfig(offload_to_cpu=True), its
    # default), the model's not: where FSDP.optim_state_dict's offload is what differs from sd_full
    "sd_full_optim_offload": "full",
    "sd_sharded": "sharded",
    "sd_local": "local",
    # FSDP1's older optimizer functions
    "legacy_full_scatter": "full",  # full_optim_state_dict -> scatter_full_optim_state_dict
    "legacy_full_shard": "full",  # full_optim_state_dict -> shard_full_optim_state_dict
    # the FSDP tutorial: rank 0 loads the full model before wrapping, sync_module_states
    # broadcasts it, scatter_full_optim_state_dict for the optimizer
    "legacy_full_rank0_init": "full",
    "legacy_sharded": "sharded",  # sharded_optim_state_dict -> flatten_sharded_optim_state_dict
    # torch.distributed.checkpoint.state_dict get_state_dict / set_state_dict
    "dsd_full": "full",
    "dsd_full_offload": "full",  # cpu_offload=True
    "dsd_full_bcast": "full",  # cpu_offload=True, broadcast_from_rank0 on load
    "dsd_full_bcast_all": "full",  # the same, every rank passing the state it loaded
    "dsd_sharded": "sharded",
    "dsd_sharded_offload": "sharded",
    # dsd_sharded after the optimizer's state is made in the gradients' dtype (a workaround of
    # dsd-init-optim-state-grad-dtype, the plain layout's)
    "dsd_sharded_gradinit": "sharded",
    # flatten_optimizer_state_dict=True: param groups keyed by parameter name (pipeline stages)
    "dsd_full_flat": "full",
    "dsd_sharded_flat": "sharded",
}

# Axis values that are the default of their wrapper family are left out of the id to keep it
# short; they are still in `axes()` and in results.json.
DEFAULT_SHARDING: dict[str, str] = {
    "ddp": "replicate",
    "fsdp2": "shard",
    "plain": "none",
    "tp": "tp",
    "pp": "stages",
}
DEFAULT_PRECISION = "fp32"
DEFAULT_CONSTRUCTION = "ctor"  # the fresh model by its constructor (conformance.construction)
KINDS = ("full", "local", "sharded")

# The grammar of a cell's optimizer word: the optimizer, then its options, each an axis of its
# own (conformance.optim): an implementation (foreach, fused), "groups" (two parameter groups),
# and an LR scheduler's name. adamw, adam+fused, adamw+groups+onecycle; "adamw+sched" is AdamW
# under StepLR, the word the matrix's first scheduler had.
IMPLS = ("foreach", "fused")
GROUPS = "groups"


def optimizer_token(base: str, impl: str = "", groups: bool = False, scheduler: str = "") -> str:
    """The optimizer word of an id from its axes."""
    return "+".join(p for p in (base, impl, GROUPS if groups else "", scheduler) if p)


def optimizer_axes(token: str) -> dict[str, str]:
    """The axes of an optimizer word: base_optimizer, optimizer_impl ("" the default), param_groups
    ("groups" or ""), scheduler ("" none)."""
    return dict(_optimizer_axes(token))


@functools.cache
def _optimizer_axes(token: str) -> tuple[tuple[str, str], ...]:
    base, *options = token.split("+")
    impl = next((o for o in options if o in IMPLS), "")
    rest = [o for o in options if o not in IMPLS and o != GROUPS]
    if (
        len(rest) > 1
        or len(options) != len(set(options))
        or optimizer_token(base, impl, GROUPS in options, "".join(rest)) != token
    ):
        raise ValueError(
            f"optimizer {token!r}: write optimizer[+foreach|+fused][+groups][+scheduler], e.g. adamw+groups+onecycle"
        )
    return (
        ("base_optimizer", base),
        ("optimizer_impl", impl),
        ("param_groups", GROUPS if GROUPS in options else ""),
        ("scheduler", "".join(rest)),
    )


@dataclass(frozen=True, order=True)
class Case:
    """The axes of one cell. Field order is the sort order of the matrix."""

    # ddp | fsdp1 | fsdp1+orig | fsdp2 | fsdp2+noreshard | fsdp2+ac | fsdp2+compile |
    # fsdp2+offload | tp | pp (family+option)
    wrapper: str
    # replicate (ddp) | full_shard, ..., hybrid_shard (fsdp1) | shard, hsdp, tp (dp x tp),
    # hsdp_tp (replicate x shard x tp) (fsdp2) | tp (tp) | stages, fsdp (stages x dp) (pp)
    sharding: str
    api: str  # a key of API_KINDS
    storage: str  # torch_save | torch_save_per_rank | dcp
    optimizer: str  # the optimizer word: optimizer[+impl][+groups][+scheduler] (optimizer_axes)
    model: str  # mlp
    world_size: int
    precision: str = DEFAULT_PRECISION
    check: str = field(default="roundtrip")  # roundtrip | resume | hygiene | corrupt
    variant: str = ""  # what the check varies, e.g. the corruption of a corrupt cell
    # A registered strategy (conformance.strategy.registry) instead of the built-in ones: its
    # api is the state-dict kind it is asked for (full, sharded, local), its storage its own.
    strategy: str = ""
    # HSDP's (replicate, shard) mesh as "RxS", e.g. "1x4"; "" is (2, world_size / 2), the mesh
    # the matrix had before the axis existed (an id names only other meshes). FSDP2 + TP's
    # (dp, tp) mesh "DxT", HSDP + TP's (replicate, shard, tp) "RxSxT", pipeline stages with
    # FSDP inside each (stages, dp) "PxD".
    mesh: str = ""
    # how the fresh model the checkpoint is loaded into is built (conformance.construction): by its
    # constructor, or on the meta device; an id names only the others
    construction: str = DEFAULT_CONSTRUCTION

    def __post_init__(self) -> None:
        if self.strategy:
            if self.api not in KINDS:
                raise ValueError(
                    f"a registered strategy's api is a state-dict kind {KINDS}, got {self.api!r}"
                )
        elif self.api not in API_KINDS:
            raise ValueError(f"unknown state-dict API {self.api!r}; known: {sorted(API_KINDS)}")
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        _optimizer_axes(self.optimizer)  # raises on a word outside the grammar (cached)
        if self.mesh and (
            len(self.mesh.split("x")) not in (2, 3)
            or not all(d.isdigit() and int(d) > 0 for d in self.mesh.split("x"))
        ):
            raise ValueError(f"mesh {self.mesh!r}: give 2 or 3 sizes, e.g. 2x2 or 2x1x2")

    @property
    def mesh_sizes(self) -> tuple[int, ...]:
        """The mesh axis's sizes, () without one (the layout's default mesh: conformance.layout)."""
        return tuple(int(d) for d in self.mesh.split("x")) if self.mesh else ()

    @property
    def kind(self) -> str:
        """full, sharded or local: what the checkpoint holds on each rank."""
        return API_KINDS.get(self.api, self.api)

    @property
    def family(self) -> str:
        """ddp, fsdp1 or fsdp2: the wrapper without its option."""
        return self.wrapper.split("+", 1)[0]

    @property
    def wrapper_token(self) -> str:
        """family[_sharding][+option], e.g. fsdp1_full_shard+orig, fsdp2_hsdp+noreshard."""
        family, _, option = self.wrapper.partition("+")
        token = family if DEFAULT_SHARDING.get(family) == self.sharding else f"{family}_{self.sharding}"
        return f"{token}+{option}" if option else token

    @property
    def layout(self) -> str:
        """How the model is spread: wrapper token, mesh, world size (fsdp2_tp-mesh2x2-w4)."""
        mesh = f"-mesh{self.mesh}" if self.mesh else ""
        return f"{self.wrapper_token}{mesh}-w{self.world_size}"

    @property
    def config(self) -> str:
        """The strategy without the rest: wrapper token, API and storage; a registered strategy's
        name leads (lightning_fabric-fsdp1_full_shard-full-native)."""
        config = f"{self.wrapper_token}-{self.api}-{self.storage}"
        return f"{self.strategy}-{config}" if self.strategy else config

    @functools.cached_property
    def id(self) -> str:
        """Readable and stable: built from the axes only, e.g. fsdp2-dsd_sharded-dcp-adamw-mlp-w2;
        other checks than the round trip lead with their name (resume-fsdp2-...) and end with
        their variant (corrupt-...-w2-truncated)."""
        parts = [self.config, self.optimizer, self.model]
        if self.precision != DEFAULT_PRECISION:
            parts.append(self.precision)
        if self.construction != DEFAULT_CONSTRUCTION:
            parts.append(self.construction)
        parts.append(f"w{self.world_size}")
        if self.mesh:
            parts.append(f"mesh{self.mesh}")
        if self.check != "roundtrip":
            parts.insert(0, self.check)
        if self.variant:
            parts.append(self.variant)
        return "-".join(parts)

    def axes(self) -> dict[str, str | int]:
        """Every axis, plus the derived ones (the state-dict kind, the family, the optimizer word's
        axes), as plain JSON-able values: a copy the caller may change."""
        return dict(self._axes)

    @functools.cached_property
    def _axes(self) -> dict[str, str | int]:  # every field is a str or an int: no deep copy
        out: dict[str, str | int] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["kind"] = self.kind
        out["family"] = self.family
        out.update(optimizer_axes(self.optimizer))
        return out


@dataclass(frozen=True, order=True)
class Transfer:
    """A checkpoint saved by one configuration and loaded by another: resharding (the same
    strategy in a world of another size) or interop (another wrapper, API or storage)."""

    check: str  # reshard | interop
    save: Case
    load: Case

    def __post_init__(self) -> None:
        if not self.check.isidentifier():  # the transfer checks are the registry's (check.registry)
            raise ValueError(f"a transfer's check is a check's name, got {self.check!r}")

    @property
    def world_size(self) -> int:
        return self.save.world_size

    @property
    def kind(self) -> str:
        return self.save.kind

    @property
    def strategy(self) -> str:
        """The registered strategy of either side (a transfer between one and a built-in
        configuration belongs to the registered strategy)."""
        return self.save.strategy or self.load.strategy

    @property
    def family(self) -> str:
        return self.save.family

    @functools.cached_property
    def id(self) -> str:
        """reshard-<save cell>-to-w<M>; relayout-<save cell>-to-<load layout>;
        interop-<save config>-to-<load config>-<optimizer>-<model>-w<N>."""
        if self.check == "reshard":
            return f"reshard-{self.save.id}-to-w{self.load.world_size}"
        if self.check == "relayout":
            return f"relayout-{self.save.id.removeprefix('relayout-')}-to-{self.load.layout}"
        return f"interop-{self.save.config}-to-{self.load.config}-{self.save.optimizer}-{self.save.model}-w{self.world_size}"

    def axes(self) -> dict[str, str | int]:
        out: dict[str, str | int] = {"check": self.check}
        out.update(self.save.axes())
        out["check"] = self.check
        out["save_world_size"] = self.save.world_size
        out["load_world_size"] = self.load.world_size
        out["load_config"] = self.load.config
        n, m = self.save.world_size, self.load.world_size
        out["direction"] = "grow" if m > n else "shrink" if m < n else "same"
        out["storage_change"] = "yes" if self.save.storage != self.load.storage else "no"
        for key in ("wrapper", "sharding", "api", "kind", "storage", "family", "mesh"):
            out[f"load_{key}"] = self.load.axes()[key]
        out["layout"], out["load_layout"] = self.save.layout, self.load.layout
        return out


def repro_command(cell_id: str, check: str, world_size: int, strategy: str = "") -> str:
    """The one command the reports give for a cell (a registered strategy's by its name, as an
    entry point has it; one registered by module:ATTR takes that instead)."""
    option = f" --strategy {strategy}" if strategy else ""
    if check == "roundtrip" and not strategy:
        return f"torchrun --nproc-per-node {world_size} -m conformance.repro {cell_id}"
    return f"python -m conformance.repro {cell_id}{option}"


def seed_of(cell: Case | Transfer) -> int:
    """The ranks' seed of a cell, from its id: stable across runs and xdist workers (Python's
    hash() is not)."""
    return zlib.crc32(cell.id.encode()) % 2**31

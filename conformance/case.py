"""The case record: one cell of the conformance matrix, as a frozen, picklable value."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# The state-dict kind of every API token. The kind is a word of every id, so that
# `pytest -k sharded` selects exactly the sharded cells.
API_KINDS: dict[str, str] = {
    "sd_full": "full",
    "sd_full_offload": "full",
    "sd_sharded": "sharded",
    "sd_local": "local",
    "dsd_full": "full",
    "dsd_sharded": "sharded",
}

# Axis values that are the default of their wrapper are left out of the id to keep it short;
# they are still in `axes()` and in results.json.
DEFAULT_SHARDING: dict[str, str] = {"ddp": "replicate", "fsdp2": "shard"}
DEFAULT_PRECISION = "fp32"


@dataclass(frozen=True, order=True)
class Case:
    """The axes of one cell. Field order is the sort order of the matrix."""

    wrapper: str  # ddp | fsdp1 | fsdp2
    sharding: str  # replicate (ddp) | full_shard, ... (fsdp1) | shard (fsdp2)
    api: str  # a key of API_KINDS
    storage: str  # torch_save | torch_save_per_rank | dcp
    optimizer: str  # adamw
    model: str  # mlp
    world_size: int
    precision: str = DEFAULT_PRECISION
    check: str = field(default="roundtrip")

    def __post_init__(self) -> None:
        if self.api not in API_KINDS:
            raise ValueError(f"unknown state-dict API {self.api!r}; known: {sorted(API_KINDS)}")
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")

    @property
    def kind(self) -> str:
        """full, sharded or local: what the checkpoint holds on each rank."""
        return API_KINDS[self.api]

    @property
    def wrapper_token(self) -> str:
        if DEFAULT_SHARDING.get(self.wrapper) == self.sharding:
            return self.wrapper
        return f"{self.wrapper}_{self.sharding}"

    @property
    def id(self) -> str:
        """Readable and stable: built from the axes only, e.g. fsdp2-dsd_sharded-dcp-adamw-mlp-w2."""
        parts = [self.wrapper_token, self.api, self.storage, self.optimizer, self.model]
        if self.precision != DEFAULT_PRECISION:
            parts.append(self.precision)
        parts.append(f"w{self.world_size}")
        return "-".join(parts)

    def axes(self) -> dict[str, str | int]:
        """Every axis, plus the derived state-dict kind, as plain JSON-able values."""
        out: dict[str, str | int] = asdict(self)
        out["kind"] = self.kind
        return out

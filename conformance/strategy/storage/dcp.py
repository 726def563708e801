"""dcp: a torch.distributed.checkpoint directory; loads in place into the fresh model's state dict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conformance.strategy.protocol import StateDict
from conformance.strategy.storage.base import Refusal, files
from conformance.world import RankContext


@dataclass(frozen=True)
class DcpDirectory:
    """A torch.distributed.checkpoint directory; loads in place into the fresh model's state dict."""

    name: str = "dcp"
    one_file_by_rank0: bool = False
    per_rank: bool = False
    loads_in_place: bool = True
    representative: bool = True  # the storage the get/set_state_dict APIs are documented with
    damage: tuple[str, ...] = (
        "flipped_bytes",
        "missing_metadata",
        "missing_shard",
        "other_model",
        "truncated",
    )
    reshard_refusals: tuple[Refusal, ...] = ()
    saves_with_dcp: bool = True  # dcp.save writes it: every key of the state dict a string

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(state, checkpoint_id=str(path))

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        import torch.distributed.checkpoint as dcp

        state = template()
        dcp.load(state, checkpoint_id=str(path))
        return state

    def read(self, path: Path) -> StateDict:
        """The whole directory as one state dict, without a process group (dcp_to_torch_save)."""
        import tempfile

        import torch
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            dcp_to_torch_save(str(path), f"{tmp}/checkpoint.pt")
            return torch.load(f"{tmp}/checkpoint.pt", map_location="cpu", weights_only=True)

    def payload(self, path: Path) -> tuple[Path, int, int]:
        """The largest item DCP's own metadata says it wrote."""
        from torch.distributed.checkpoint import FileSystemReader

        storage = FileSystemReader(str(path)).read_metadata().storage_data
        info = max(storage.values(), key=lambda s: s.length)
        return path / info.relative_path, info.offset, info.length

    def data_files(self, path: Path) -> list[Path]:
        return files(path)

    def rank_files(self, path: Path, rank: int) -> list[Path]:
        return sorted(path.glob(f"__{rank}_*.distcp"))

    def metadata_files(self, path: Path) -> list[Path]:
        return [path / ".metadata"] if (path / ".metadata").exists() else []

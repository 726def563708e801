"""hf_safetensors: the model through DCP's Hugging Face writer, consolidated into safetensors
files an inference user loads with the `safetensors` package in one process; the optimizer and
scheduler, which safetensors cannot hold (it stores tensors only), in a DCP directory beside it.
Loads through DCP's Hugging Face reader, in place. Unsupported where the installed torch has no
HuggingFaceStorageWriter or `safetensors` is not installed, saying which."""

from __future__ import annotations

import importlib.util
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from conformance.strategy.protocol import StateDict
from conformance.strategy.storage.base import Refusal, files
from conformance.world import RankContext

MODEL, REST = "model", "training_state"


def _unavailable() -> str | None:
    import torch.distributed.checkpoint as dcp

    if not hasattr(dcp, "HuggingFaceStorageWriter"):
        return f"torch {torch.__version__} has no torch.distributed.checkpoint.HuggingFaceStorageWriter"
    if importlib.util.find_spec("safetensors") is None:
        return "the safetensors package is not installed (pip install safetensors)"
    return None


def read_safetensors(folder: Path, required: bool = False) -> StateDict:
    """Every tensor of the .safetensors files in `folder`, read as an inference user reads them:
    safetensors' own load_file, one process, no torch.distributed. required: a folder with no
    such file raises FileNotFoundError (else it reads as {})."""
    from safetensors.torch import load_file

    found = sorted(folder.glob("*.safetensors"))
    if required and not found:
        raise FileNotFoundError(f"no Hugging Face export (*.safetensors) in {folder}")
    tensors: StateDict = {}
    for file in found:
        tensors.update(load_file(str(file)))
    return tensors


def largest_safetensors_payload(path: Path) -> tuple[Path, int, int]:
    """(file, offset, length) of the largest tensor of the largest .safetensors file under
    `path`, from the file's own header (8-byte length, then JSON with each tensor's offsets)."""
    target = max((p for p in files(path) if p.suffix == ".safetensors"), key=lambda p: p.stat().st_size)
    with target.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    begin, end = max(
        (v["data_offsets"] for k, v in header.items() if k != "__metadata__"), key=lambda o: o[1] - o[0]
    )
    return target, 8 + size + begin, end - begin


@dataclass(frozen=True)
class HfSafetensors:
    name: str = "hf_safetensors"
    one_file_by_rank0: bool = False
    per_rank: bool = False
    loads_in_place: bool = True
    representative: bool = False
    damage: tuple[str, ...] = ("flipped_bytes", "other_model", "truncated")
    reshard_refusals: tuple[Refusal, ...] = ()
    unavailable: str | None = _unavailable()
    saves_with_dcp: bool = True

    def save(self, state: StateDict, path: Path, ctx: RankContext) -> None:
        import torch.distributed.checkpoint as dcp

        writer = dcp.HuggingFaceStorageWriter(
            str(path / MODEL), save_distributed=True, enable_consolidation=True
        )
        dcp.save(state["model"], storage_writer=writer)
        dcp.save({k: v for k, v in state.items() if k != "model"}, checkpoint_id=str(path / REST))

    def load(self, path: Path, ctx: RankContext, template: Callable[[], StateDict]) -> StateDict:
        import torch.distributed.checkpoint as dcp

        state = template()
        dcp.load(state["model"], storage_reader=dcp.HuggingFaceStorageReader(str(path / MODEL)))
        rest = {k: v for k, v in state.items() if k != "model"}
        dcp.load(rest, checkpoint_id=str(path / REST))
        return {**rest, "model": state["model"]}

    def read(self, path: Path) -> StateDict:
        """The model as an inference user loads it: the consolidated files (read_safetensors)."""
        return {"model": read_safetensors(path / MODEL)}

    def payload(self, path: Path) -> tuple[Path, int, int]:
        return largest_safetensors_payload(path / MODEL)

    def data_files(self, path: Path) -> list[Path]:
        return files(path)

    def rank_files(self, path: Path, rank: int) -> list[Path]:
        return []

    def metadata_files(self, path: Path) -> list[Path]:
        return []

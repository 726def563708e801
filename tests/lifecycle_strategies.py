"""A library with a lifecycle of its own, written for the suite's tests (torch only), and broken
copies of it, each with one flaw the lifecycle check (conformance.check.lifecycle) must catch.

`Folders`: the built-in FSDP2 + DCP strategy saving one folder per step (step-N), keeping the
latest k (rank 0 deletes the oldest after a save), resuming the newest folder that holds DCP's
.metadata (its commit), else the seed's model, else nothing; a model-only last save writes the
model state dict alone (in Hugging Face safetensors under export_hf: DCP's HuggingFaceStorageWriter,
consolidated, as torchtitan writes it). Its flaws (FLAWS):
- deletes_latest: the retention deletes the newest folders instead of the oldest;
- trusts_newest: the resume takes the newest folder and, finding no commit in it, says it
  resumed without loading anything;
- says_loaded: a resume with no checkpoint says it loaded one;
- seeds_everything: the seed load restores the optimizer and scheduler too, not the model alone;
- exports_bf16: the model-only last save casts the model to bf16;
- skips_unmapped: the Hugging Face export leaves out the tensors its name map lacks (the biases),
  as a converter that skips what it does not know;
- purges_early: a save deletes every older folder at once and writes the new one in the
  background (2 s later): a kill while it is in flight leaves no complete checkpoint.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageWriter
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

from conformance.adapters import saved_model_state
from conformance.case import Case
from conformance.layout.builtin import builtin_strategy
from conformance.strategy.lifecycle import Policy
from conformance.strategy.protocol import ComposedStrategy, TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.hf_safetensors import read_safetensors
from conformance.world import RankContext

FLAWS = (
    "deletes_latest",
    "trusts_newest",
    "says_loaded",
    "seeds_everything",
    "exports_bf16",
    "skips_unmapped",
    "purges_early",
)


def _steps(path: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in path.glob("step-*")) if path.is_dir() else []


class FolderRun:
    def __init__(
        self,
        inner: ComposedStrategy,
        state: TrainState,
        path: Path,
        policy: Policy,
        ctx: RankContext,
        flaw: str,
    ) -> None:
        self.inner, self.state, self.path, self.policy, self.ctx, self.flaw = (
            inner,
            state,
            path,
            policy,
            ctx,
            flaw,
        )
        self.group = dist.new_group(backend="gloo") if flaw == "purges_early" else None
        self.writer: threading.Thread | None = None

    def folder(self, step: int) -> Path:
        return self.path / f"step-{step}"

    def save(self, step: int, last: bool = False) -> None:
        if last and self.policy.model_only_last:
            model = get_model_state_dict(self.state.model)
            if self.flaw == "exports_bf16":
                model = {k: v.to(torch.bfloat16) for k, v in model.items()}
            if not self.policy.export_hf:
                dcp.save({"model": model}, checkpoint_id=self.folder(step))
                return
            if self.flaw == "skips_unmapped":
                model = {k: v for k, v in model.items() if k.endswith("weight")}
            writer = HuggingFaceStorageWriter(
                self.folder(step), save_distributed=True, enable_consolidation=True
            )
            dcp.save(model, storage_writer=writer)
        elif self.flaw == "purges_early":
            self._delete(_steps(self.path))
            state = self.inner._state_dict(self.state)
            self.writer = threading.Thread(target=self._write_later, args=(state, self.folder(step)))
            self.writer.start()
            return
        else:
            self.inner.save(self.state, self.folder(step), self.ctx)
        if self.policy.keep_latest:
            steps = _steps(self.path)
            keep = self.policy.keep_latest
            self._delete(steps[keep:] if self.flaw == "deletes_latest" else steps[:-keep])

    def _write_later(self, state: dict[str, Any], folder: Path) -> None:
        time.sleep(2.0)
        dcp.save(state, checkpoint_id=folder, process_group=self.group)

    def _delete(self, steps: list[int]) -> None:
        dist.barrier()
        if self.ctx.rank == 0:
            for step in steps:
                shutil.rmtree(self.folder(step))
        dist.barrier()

    def resume(self) -> bool:
        steps = _steps(self.path)
        complete = [s for s in steps if (self.folder(s) / ".metadata").exists()]
        if self.flaw == "trusts_newest" and steps and steps[-1] not in complete:
            return True
        if complete:
            self.inner.load(self.state, self.folder(complete[-1]), self.ctx)
            return True
        if self.policy.seed and self.flaw == "seeds_everything":
            self.inner.load(self.state, Path(self.policy.seed), self.ctx)
            return True
        if self.policy.seed:
            model = {"model": get_model_state_dict(self.state.model)}
            dcp.load(model, checkpoint_id=self.policy.seed)
            set_model_state_dict(self.state.model, model["model"])
            return True
        return self.flaw == "says_loaded"

    def close(self) -> None:
        if self.writer is not None:
            self.writer.join()


@dataclass(frozen=True)
class Folders:
    case: Case
    flaw: str = ""

    @property
    def inner(self) -> ComposedStrategy:
        return builtin_strategy(dataclasses.replace(self.case, api="dsd_sharded", storage="dcp", strategy=""))

    def wrap(self, model: torch.nn.Module, ctx: RankContext) -> torch.nn.Module:
        return self.inner.wrap(model, ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.inner.save(state, path, ctx)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.inner.load(state, path, ctx)

    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> FolderRun:
        return FolderRun(self.inner, state, path, policy, ctx, self.flaw)

    def step_folder(self, path: Path, step: int) -> Path:
        return path / f"step-{step}"

    def commit_files(self, path: Path, step: int) -> list[Path]:
        return [self.step_folder(path, step) / ".metadata"]

    def read_export(self, path: Path, step: int, policy: Policy) -> dict[str, Any]:
        if not policy.export_hf:
            return saved_model_state(self.step_folder(path, step), "model")
        return read_safetensors(self.step_folder(path, step), required=True)


def folders(case: Case) -> Folders:
    return Folders(case)


def _flawed(flaw: str) -> Any:
    def factory(case: Case) -> Folders:
        return Folders(case, flaw)

    factory.__name__ = factory.__qualname__ = flaw
    return factory


for _flaw in FLAWS:
    globals()[_flaw] = _flawed(_flaw)

SUPPORTS = Supports(wrappers=(("fsdp2", "shard"),), kinds=("sharded",), checks=("lifecycle",))
FOLDERS = RegisteredStrategy(
    "folders", folders, SUPPORTS, storage="dcp", description="the tests' folder library"
)

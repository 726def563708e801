"""A new checkpoint library as a contributor adds one: one module that puts the library's own
objects in place and calls its own save and load, registered as a strategy (here by
`--strategy tests.new_library_plugin:STRATEGY`; in the package, a module of
conformance/adapters/, its entry point in pyproject.toml and its pin in
conformance/versions/libraries.py). The library: safetensors' `save_model` / `load_model`
(which deduplicate and restore tied tensors themselves) for the model, on DDP's module, and
`torch.save` of the optimizer and scheduler beside it, as a Trainer writes model.safetensors and
optimizer.pt. No hygiene: save_model drops a tied tensor's second name, which its documented
reader, load_model, restores; a plain dict of the file lacks it. `requires` names the distribution: without it every cell is a skip that names
it. Nothing else of the suite is edited."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from conformance.case import Case
from conformance.models import has_idle_parameters
from conformance.strategy import RegisteredStrategy, Supports, TrainState
from conformance.world import RankContext


class SafetensorsModel:
    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP

        # a parameter that never gets a gradient needs DDP's search for unused ones (documented)
        return DDP(model.to(ctx.device), find_unused_parameters=has_idle_parameters(model))

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from safetensors.torch import save_model

        if ctx.rank == 0:  # every replica holds the same state: rank 0 writes it
            path.mkdir(parents=True, exist_ok=True)
            save_model(state.model.module, str(path / "model.safetensors"))
            scheduler = state.scheduler.state_dict() if state.scheduler else None
            torch.save({"optim": state.optim.state_dict(), "scheduler": scheduler}, path / "optimizer.pt")
        dist.barrier()

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from safetensors.torch import load_model

        load_model(state.model.module, str(path / "model.safetensors"), device=str(ctx.device))
        rest = torch.load(path / "optimizer.pt", weights_only=True, map_location=ctx.device)
        state.optim.load_state_dict(rest["optim"])
        if state.scheduler:
            state.scheduler.load_state_dict(rest["scheduler"])


def make(case: Case) -> SafetensorsModel:
    return SafetensorsModel()


STRATEGY = RegisteredStrategy(
    name="safetensors_model",
    factory=make,
    supports=Supports(wrappers=(("ddp", "replicate"),), kinds=("full",), checks=("roundtrip", "resume")),
    storage="safetensors_files",
    requires=("safetensors",),
    description="safetensors' save_model / load_model on DDP's module, the optimizer in torch.save beside it",
)

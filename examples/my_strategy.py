"""A complete strategy to gate: FSDP2 + get/set_state_dict + torch.distributed.checkpoint.

    pytest cases --strategy examples.my_strategy:STRATEGY --matrix ci

writes its matrix (results.json, matrix.md, matrix.html) under reports/runs/.
"""

import tempfile
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from conformance.strategy import RegisteredStrategy, Supports, TrainState


class Fsdp2Dcp:
    def __init__(self, full: bool) -> None:
        self.options = StateDictOptions(full_state_dict=full)

    def wrap(self, model, ctx):  # every method runs on every rank
        return fully_shard(model.to(ctx.device), mesh=init_device_mesh(ctx.device.type, (ctx.world_size,)))

    def state(self, state: TrainState) -> dict:
        model, optim = get_state_dict(state.model, state.optim, options=self.options)
        scheduler = state.scheduler.state_dict() if state.scheduler else {}  # the LR schedule too
        return {"model": model, "optim": optim, "scheduler": scheduler}

    def save(self, state: TrainState, path: Path, ctx) -> None:
        dcp.save(self.state(state), checkpoint_id=path)

    def load(self, state: TrainState, path: Path, ctx) -> None:
        loaded = self.state(state)
        dcp.load(loaded, checkpoint_id=path)  # in place
        set_state_dict(
            state.model,
            state.optim,
            model_state_dict=loaded["model"],
            optim_state_dict=loaded["optim"],
            options=self.options,
        )
        if state.scheduler:
            state.scheduler.load_state_dict(loaded["scheduler"])

    def read_model_state(self, path: Path) -> dict:  # in one process, as an inference user would
        with tempfile.TemporaryDirectory() as tmp:
            dcp_to_torch_save(path, f"{tmp}/model.pt")  # DCP's own conversion to one file
            return torch.load(f"{tmp}/model.pt", weights_only=True)["model"]


def make(case):  # on every rank, with the cell's Case (its axes: case.kind, case.world_size, ...)
    return Fsdp2Dcp(full=case.kind == "full")


STRATEGY = RegisteredStrategy(
    name="my_fsdp2_dcp",
    factory=make,
    supports=Supports(
        wrappers=(("fsdp2", "shard"),),
        kinds=("sharded",),
        checks=("roundtrip", "resume", "reshard", "relayout", "interop", "hygiene", "corrupt"),
    ),
    storage="dcp",
)

"""OLMo-core (ai2-olmo-core 3.0): a model trained under FSDP2, FSDP1 (with and without
use_orig_params; its docstrings name FullyShardedDataParallel) or DDP, wrapped by the cell's
layout, checkpointed through OLMo-core's own distributed checkpoint API, two ways.

`olmo_core_functions`, called as `olmo_core.distributed.checkpoint`'s module documentation tells a
user to ("Use save_model_and_optim_state() to write a checkpoint with your model and optimizer's
state, then use load_model_and_optim_state() to load the checkpoint in-place"):
- a save is `save_model_and_optim_state(dir, model, optim)` on every rank: it takes torch's
  `get_model_state_dict` / `get_optimizer_state_dict(full_state_dict=False, cpu_offload=True)`
  (sharded) and writes them as one DCP directory with its own RemoteFileSystemWriter
  (`__{rank}_{n}.distcp` and `.metadata`, replicated tensors written by the lowest rank); its
  docstring says the wrapped model needs no state-dict type set first. The LR scheduler is no part
  of that API (OLMo-core's schedulers are functions of the step): rank 0 torch.saves its
  state_dict() beside it, `scheduler.pt`;
- a load is `load_model_and_optim_state(dir, model, optim)` on every rank (in place, strict=True,
  its defaults), then the scheduler's state_dict from `scheduler.pt`.

`olmo_core_checkpointer`, called as OLMo-core's Trainer calls its `Checkpointer`
(olmo_core.train.checkpoint, trainer.py's save_checkpoint / load_checkpoint): the model and the
optimizer in `BasicTrainModule(model, optim, rank_microbatch_size)`, the TrainModule the
package provides for any nn.Module ("mainly used as an example and for testing"; the others need
OLMo's own Transformer); a save is `Checkpointer(work_dir).save(dir, train_module, train_state)`,
which writes `train/rank{rank}.pt` (train_state, torch.save) and `model_and_optim/` (DCP of
`train_module.state_dict_to_save()`) into `dir-tmp`, renames it to `dir` and writes
`.metadata.json`; a load is `Checkpointer(work_dir).load(dir, train_module)`, which loads
`model_and_optim` in place into `train_module.state_dict_to_load(...)`, calls
`train_module.load_state_dict(...)` and returns the train state. The train state a Trainer saves
(`Trainer.state_dict()`: steps, data loader, RNG) is here the harness's LR scheduler's state_dict(),
the training state beside model and optimizer that the cell has.

Both save the sharded kind (full_state_dict=False, always); the checks damage the DCP data. On
the CPU nothing in these paths needs CUDA (torch.cuda.synchronize and empty_cache are called only
when CUDA is available; cpu_offload of a sharded state dict is a no-op there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from conformance.adapters import ADAPTER_MODELS
from conformance.case import Case
from conformance.layout.registry import layout_of
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

DIST = "ai2-olmo-core"
SCHEDULER = "scheduler.pt"  # the functions row's scheduler, beside OLMo-core's DCP directory
TRAIN_STATE_KEY = "scheduler"  # the checkpointer row's scheduler, in the train state it saves
WRAPPERS = (("fsdp2", "shard"), ("fsdp1", "full_shard"), ("fsdp1+orig", "full_shard"), ("ddp", "replicate"))
DAMAGE = ("flipped_bytes", "missing_metadata", "missing_shard", "other_model", "truncated")


@dataclass(frozen=True)
class OlmoCoreRow:
    """What both rows share: the cell's case, and the model wrapped by the cell's layout."""

    case: Case

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return layout_of(self.case).build(self.case).wrap(model, ctx)


@dataclass(frozen=True)
class OlmoCoreFunctions(OlmoCoreRow):
    """save_model_and_optim_state / load_model_and_optim_state (olmo_core.distributed.checkpoint)."""

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from olmo_core.distributed.checkpoint import save_model_and_optim_state

        save_model_and_optim_state(str(path), state.model, state.optim)
        if ctx.rank == 0 and state.scheduler is not None:
            torch.save(state.scheduler.state_dict(), path / SCHEDULER)
        torch.distributed.barrier()

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from olmo_core.distributed.checkpoint import load_model_and_optim_state

        load_model_and_optim_state(str(path), state.model, state.optim)
        if state.scheduler is not None:
            state.scheduler.load_state_dict(torch.load(path / SCHEDULER, weights_only=True))


def work_dir(ctx: RankContext) -> Path:
    """The Checkpointer's work_dir (a cache for remote checkpoints), shared by the ranks."""
    return ctx.cell_dir / "olmo_core_work"


@dataclass(frozen=True)
class OlmoCoreCheckpointer(OlmoCoreRow):
    """Checkpointer.save / Checkpointer.load (olmo_core.train.checkpoint) of a BasicTrainModule."""

    def train_module(self, state: TrainState):  # type: ignore[no-untyped-def]
        from olmo_core.train.train_module import BasicTrainModule

        # rank_microbatch_size sizes its train_batch, which the harness's training does not call
        return BasicTrainModule(state.model, state.optim, rank_microbatch_size=1)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from olmo_core.train.checkpoint import Checkpointer

        train_state = {} if state.scheduler is None else {TRAIN_STATE_KEY: state.scheduler.state_dict()}
        Checkpointer(work_dir=work_dir(ctx)).save(str(path), self.train_module(state), train_state)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from olmo_core.train.checkpoint import Checkpointer

        train_state = Checkpointer(work_dir=work_dir(ctx)).load(str(path), self.train_module(state))
        if state.scheduler is not None:
            if train_state is None or TRAIN_STATE_KEY not in train_state:
                raise FileNotFoundError(f"no scheduler state in the train state of {path}")
            state.scheduler.load_state_dict(train_state[TRAIN_STATE_KEY])


def storage(name: str) -> OwnFormat:
    """OLMo-core's DCP directory: data `__{rank}_{n}.distcp`, metadata `.metadata`."""
    return OwnFormat(
        name,
        damage=DAMAGE,
        data="*.distcp",
        rank_file="__{rank}_*.distcp",
        metadata=(".metadata",),
    )


# both rows: the sharded kind (full_state_dict=False, always), every model the adapters declare
SUPPORTS = Supports(
    wrappers=WRAPPERS,
    kinds=("sharded",),
    checks=("corrupt", "reshard", "resume", "roundtrip"),
    models=ADAPTER_MODELS,
)

OLMO_CORE_FUNCTIONS = RegisteredStrategy(
    name="olmo_core_functions",
    factory=OlmoCoreFunctions,
    supports=SUPPORTS,
    storage=storage("olmo_core_dcp"),
    requires=(DIST,),
    imports=("olmo_core.distributed.checkpoint",),
    description="OLMo-core save_model_and_optim_state(dir, model, optim) on every rank (torch's "
    "sharded get_model/optimizer_state_dict with cpu_offload, written as DCP by OLMo-core's own "
    "RemoteFileSystemWriter), the scheduler's state_dict beside it (scheduler.pt, rank 0); "
    "load_model_and_optim_state(dir, model, optim) in place on every rank",
)

OLMO_CORE_CHECKPOINTER = RegisteredStrategy(
    name="olmo_core_checkpointer",
    factory=OlmoCoreCheckpointer,
    supports=SUPPORTS,
    storage=storage("olmo_core_trainer"),
    requires=(DIST,),
    imports=("olmo_core.train.checkpoint",),
    description="OLMo-core Checkpointer(work_dir).save(dir, BasicTrainModule(model, optim), "
    "train_state) as its Trainer saves (train/rank{rank}.pt, model_and_optim/ as DCP of the train "
    "module's sharded state dict, .metadata.json), the scheduler's state_dict as the train state; "
    "Checkpointer.load(dir, train_module) in place, the scheduler from the train state it returns",
)

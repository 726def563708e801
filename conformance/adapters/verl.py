"""verl (0.9.1): a model trained under FSDP1 (with and without use_orig_params) or FSDP2, wrapped by
the cell's layout, checkpointed through verl's `FSDPCheckpointManager`
(verl/utils/checkpoint/fsdp_checkpoint_manager.py), as verl's trainers call it.

verl's FSDP engine (verl/workers/engine/fsdp/transformer_impl.py, `initialize`) builds it as
`FSDPCheckpointManager(model=..., optimizer=..., lr_scheduler=..., processing_class=...,
checkpoint_config=...)`; its workers call `save_checkpoint(local_path, hdfs_path, global_step,
max_ckpt_to_keep)` and `load_checkpoint(local_path, hdfs_path, del_local_after_load)`. The row
passes the harness's optimizer and LR scheduler, no processing class (a tokenizer is optional:
saved only when given), and verl's own default `CheckpointConfig()` (save and load contents
`["model", "optimizer", "extra"]`).

What a save writes, into `local_path` (every rank its own files, the world size in their names):
`model_world_size_{W}_rank_{r}.pt` (the model's state dict under FSDP1's SHARDED_STATE_DICT, or
FSDP2's DTensors), `optim_world_size_{W}_rank_{r}.pt` (`optimizer.state_dict()` as it is, inside
that state-dict context), `extra_state_world_size_{W}_rank_{r}.pt` (the scheduler's state_dict and
the RNG states), all with torch.save; and on rank 0 `huggingface/` (the model's config,
`config.save_pretrained`) and `fsdp_config.json`. A load reads this rank's three files by this
world's size and rank, `model.load_state_dict`, `optimizer.load_state_dict`, the scheduler's and
the RNG state.

The save reads the Hugging Face model's API on rank 0, unconditionally: `unwrap_model.config`
(saved with `save_pretrained`) and `unwrap_model.can_generate()`. verl trains transformers models
(its engines build them with `AutoModel*.from_pretrained`); the row makes the cell's plain model
one the way a user's own architecture becomes a transformers model, inside a `PreTrainedModel`
(conformance.adapters.transformers' `pretrained_class`: the plain model as its `model` child, a
config that names it), which the layout then wraps. Nothing of verl's checkpoint code is changed.

The run's lifecycle (the lifecycle check) is verl's `CheckpointHandler`
(verl/utils/checkpoint/checkpoint_handler.py), exported by `verl.utils.checkpoint` and built by its
SFT trainer (verl/trainer/sft_trainer.py) as `CheckpointHandler(engine=..., train_dataloader=...,
default_local_dir=..., max_ckpt_to_keep=..., resume_mode="auto")`: `save_checkpoint(step)` has the
engine save into `global_step_{step}` (the manager prunes to `max_ckpt_to_keep`), saves the data
loader's state (`data_{dp_rank}.pt`), then writes the tracker `latest_checkpointed_iteration.txt`
(write and rename, rank 0); `load_checkpoint()` finds the step the tracker names
(`find_latest_ckpt_path`) and loads it, returning its step (0: nothing found). Its engine is
verl's `FSDPEngine`, which builds its own model from a Hugging Face path; its checkpoint methods
are the manager's with parameter offload around them, and its `save_checkpoint` moves a module
whose parameters are on the CPU to the GPU first (`load_fsdp_model_to_gpu`, which needs CUDA), so
the row stands in an engine of the manager alone: `save_checkpoint` / `load_checkpoint` call the
manager and barrier, as FSDPEngine's do without offload; `is_mp_src_rank_with_outputs()` is True
and `get_data_parallel_rank()` the rank (no sequence parallelism). The data loader is a stand-in
with an empty state (the harness has no data loader to resume).

verl has no asynchronous save for FSDP in 0.9.1 (`CheckpointConfig.async_save`: "Only
implemented for Megatron as of now"), no model-only last save (`save_contents` applies to every
save) and no seed checkpoint (its `resume_from_path` resumes everything): of the lifecycle
scenarios, the row takes the empty folder, the interrupted save and keep-latest-k.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from conformance.adapters import ADAPTER_MODELS
from conformance.case import Case
from conformance.layout.registry import layout_of
from conformance.strategy.lifecycle import Policy
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

DIST = "verl"
MANAGER = "verl.utils.checkpoint.fsdp_checkpoint_manager"
WRAPPERS = (("fsdp1", "full_shard"), ("fsdp1+orig", "full_shard"), ("fsdp2", "shard"))
TRACKER = "latest_checkpointed_iteration.txt"  # verl's get_checkpoint_tracker_filename
LIFECYCLE = ("empty_folder", "interrupted", "keep_latest")


def hf_model(model: nn.Module, case: Case) -> nn.Module:
    """The cell's plain model inside a transformers PreTrainedModel (what verl's save reads: its
    `config` and `can_generate()`), keeping the plain model's FSDP wrap units for the layout."""
    from conformance.adapters.transformers import config_of, pretrained_class

    holder = pretrained_class()(config_of(case.model))
    holder.model = model  # the harness's model, as it built it
    holder.wrap_units = getattr(model, "wrap_units", (nn.Linear,))
    return holder


def manager(state: TrainState) -> Any:
    """verl's FSDPCheckpointManager over the live state, as its FSDP engine builds it."""
    from verl.trainer.config import CheckpointConfig
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    return FSDPCheckpointManager(
        model=state.model,
        optimizer=state.optim,
        lr_scheduler=state.scheduler,
        processing_class=None,
        checkpoint_config=CheckpointConfig(),
    )


@dataclass(frozen=True)
class VerlFsdp:
    """FSDPCheckpointManager.save_checkpoint / load_checkpoint, and its CheckpointHandler's run."""

    case: Case

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return layout_of(self.case).build(self.case).wrap(hf_model(model, self.case), ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        manager(state).save_checkpoint(
            local_path=str(path), hdfs_path=None, global_step=0, max_ckpt_to_keep=None
        )

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        manager(state).load_checkpoint(local_path=str(path), hdfs_path=None, del_local_after_load=False)

    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> VerlRun:
        return VerlRun(state, path, policy)

    def step_folder(self, path: Path, step: int) -> Path:
        return path / f"global_step_{step}"

    def commit_files(self, path: Path, step: int) -> list[Path]:
        """The tracker, written (and renamed into place) after the step's files: a restart
        resumes the step it names."""
        return [path / TRACKER]


class ManagerEngine:
    """The engine CheckpointHandler drives (FSDPEngine's checkpoint methods without its offload
    moves, which need CUDA for a module on the CPU): verl's manager, then a barrier."""

    def __init__(self, state: TrainState) -> None:
        self.checkpoint_manager = manager(state)

    def is_mp_src_rank_with_outputs(self) -> bool:
        return True  # FSDPEngine's without a sequence-parallel mesh

    def get_data_parallel_rank(self) -> int:
        return torch.distributed.get_rank()  # FSDPEngine's without a sequence-parallel mesh

    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.checkpoint_manager.save_checkpoint(
            local_path=local_path,
            hdfs_path=hdfs_path,
            global_step=global_step,
            max_ckpt_to_keep=max_ckpt_to_keep,
        )
        torch.distributed.barrier()

    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = True, **kwargs: Any
    ) -> None:
        self.checkpoint_manager.load_checkpoint(
            local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
        )
        torch.distributed.barrier()


class NoDataLoader:
    """The train_dataloader CheckpointHandler saves beside each step (data_{dp_rank}.pt): the
    harness has none to resume, so an empty state."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


class VerlRun:
    """One run of verl's CheckpointHandler: save(step) after each step, as its SFT trainer calls
    `save_checkpoint(step=global_step)`; resume() is its `load_checkpoint()` at the start of a run
    (resume_mode="auto": the step the tracker names), which returns the step it resumed (0: none)."""

    def __init__(self, state: TrainState, path: Path, policy: Policy) -> None:
        from verl.utils.checkpoint import CheckpointHandler

        self.handler = CheckpointHandler(
            engine=ManagerEngine(state),
            train_dataloader=NoDataLoader(),
            default_local_dir=str(path),
            max_ckpt_to_keep=policy.keep_latest or None,
            resume_mode="auto",
        )

    def save(self, step: int, last: bool = False) -> None:
        self.handler.save_checkpoint(step)

    def resume(self) -> bool:
        return self.handler.load_checkpoint() > 0

    def close(self) -> None:
        pass  # every save is written and pruned before save_checkpoint returns


# What it writes: three torch.save files per rank (model, optim, extra_state), each named by the
# saving world's size and the rank; huggingface/ and fsdp_config.json on rank 0, which its load
# never reads (no missing_metadata cell: there is no metadata it depends on). The damage goes into
# the model's and the optimizer's files (`model_...`, `optim_...`: names ending in l and m before
# `_world_size`), not extra_state's: its largest tensor is the CPU RNG state, which no check
# compares, so damage there could only show equal values; missing_shard deletes all three.
STORAGE = OwnFormat(
    "verl_fsdp",
    per_rank=True,
    data="*[lm]_world_size_*_rank_*.pt",
    rank_file="*_world_size_*_rank_{rank}.pt",
    damage=("flipped_bytes", "missing_shard", "other_model", "truncated"),
    reshard_refusals=(
        (
            {},
            "verl's per-rank files are each one rank's shard of the saving world, named by its world "
            "size (model_world_size_{W}_rank_{r}.pt): a load in another world opens files that are not there",
        ),
    ),
)

VERL_FSDP = RegisteredStrategy(
    name="verl_fsdp",
    factory=VerlFsdp,
    supports=Supports(
        wrappers=WRAPPERS,
        kinds=("sharded",),  # SHARDED_STATE_DICT under FSDP1, DTensors under FSDP2: always
        checks=("corrupt", "lifecycle", "reshard", "resume", "roundtrip"),
        models=ADAPTER_MODELS,
        variants=(("lifecycle", LIFECYCLE),),
    ),
    storage=STORAGE,
    requires=(DIST,),
    imports=(MANAGER,),
    description="verl FSDPCheckpointManager(model, optimizer, lr_scheduler, checkpoint_config=CheckpointConfig())"
    ".save_checkpoint(local_path) / .load_checkpoint(local_path) on every rank (per-rank torch.save files "
    "of FSDP's sharded state, the scheduler and RNG; huggingface/ config on rank 0), the plain model inside a "
    "transformers PreTrainedModel (its save reads model.config and can_generate()); the lifecycle is "
    "verl's CheckpointHandler (save_checkpoint(step), load_checkpoint(); its tracker "
    "latest_checkpointed_iteration.txt) over an engine of the manager alone (FSDPEngine's save moves a CPU "
    "module to the GPU first)",
)

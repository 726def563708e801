"""NeMo Automodel (nemo-automodel 0.7.0): a model trained under FSDP2 or DDP, wrapped by the cell's
layout, checkpointed through NeMo Automodel's `Checkpointer`
(nemo_automodel/components/checkpoint/checkpointing.py), built and called as its recipes do.

Its LLM recipe (recipes/llm/train_ft.py) builds it from the YAML `checkpoint:` block as
`CheckpointingConfig(...).build(dp_rank, tp_rank, pp_rank, moe_mesh, process_group, pp_group)`;
its base recipe's `save_checkpoint` (recipes/base_recipe.py) calls
`checkpointer.save_model(model, weights_path, peft_config, tokenizer, is_final_checkpoint)` and
`checkpointer.save_optimizer(optimizer, model, weights_path, scheduler)`, its `load_checkpoint`
`checkpointer.load_model(model, weights_path/"model")` and
`checkpointer.load_optimizer(optimizer, model, weights_path, scheduler)`. The row builds
`CheckpointingConfig(checkpoint_dir=..., model_save_format="safetensors", save_consolidated=False)`
(safetensors is its default format; the consolidated Hugging Face export, by default written on a
run's final save only, is left off: a plain save is no final save) with dp_rank the rank, tp_rank
and pp_rank 0, no MoE mesh and the default process group, as a data-parallel-only recipe does.

What a save writes, into `weights_path`: `model/` (torch's sharded `get_model_state_dict`, written
by torch.distributed.checkpoint through NeMo's Hugging Face storage writer: `shard-*-model-*.safetensors`
files, one per rank, with DCP's sharding in their headers; `.hf_metadata/` and a consolidation script
on rank 0) and `optim/` (`get_optimizer_state_dict(flatten_optimizer_state_dict=True)` with the LR
scheduler's state, plain DCP: `__{rank}_0.distcp` and `.metadata`). A load reads both with dcp.load
and sets them with `set_model_state_dict` / `set_optimizer_state_dict`.
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
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

DIST = "nemo-automodel"
MODULE = "nemo_automodel.components.checkpoint.checkpointing"
# NeMo Automodel parallelizes with FSDP2 (fully_shard, its FSDP2Manager) or DDP (its DDPManager);
# it has no FSDP1 path
WRAPPERS = (("fsdp2", "shard"), ("ddp", "replicate"))


def checkpointer(path: Path, ctx: RankContext, **config: Any) -> Any:
    """NeMo Automodel's Checkpointer, as its recipe builds it from CheckpointingConfig."""
    from nemo_automodel.components.checkpoint.config import CheckpointingConfig

    options: dict[str, Any] = {"model_save_format": "safetensors", "save_consolidated": False, **config}
    return CheckpointingConfig(checkpoint_dir=str(path), **options).build(
        dp_rank=ctx.rank, tp_rank=0, pp_rank=0, moe_mesh=None, process_group=None
    )


@dataclass(frozen=True)
class NemoAutomodel:
    """Checkpointer.save_model + save_optimizer / load_model + load_optimizer."""

    case: Case

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return layout_of(self.case).build(self.case).wrap(model, ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        ckpt = checkpointer(path, ctx)
        try:
            ckpt.save_model(state.model, str(path))
            ckpt.save_optimizer(state.optim, state.model, str(path), state.scheduler)
        finally:
            ckpt.close()
        torch.distributed.barrier()

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        ckpt = checkpointer(path, ctx)
        try:
            ckpt.load_model(state.model, str(path / "model"))
            ckpt.load_optimizer(state.optim, state.model, str(path), state.scheduler)
        finally:
            ckpt.close()


# What it writes (2 ranks, FSDP2): model/shard-0000{rank+1}-model-00001-of-00001.safetensors (each
# rank's DTensor shards, DCP's storage metadata in the safetensors headers: no .metadata file),
# model/.hf_metadata/fqn_to_file_index_mapping.json and model/consolidate.sh on rank 0;
# optim/__{rank}_0.distcp and optim/.metadata. The data glob takes the .safetensors, .distcp and
# .metadata files (not the script or the json); the flipped bytes go where optim/.metadata locates
# a tensor payload. missing_shard deletes the last rank's optimizer shard (the model's files are
# numbered rank + 1, which a {rank} glob cannot name); missing_metadata deletes optim/.metadata.
STORAGE = OwnFormat(
    "nemo_safetensors",
    damage=("flipped_bytes", "missing_metadata", "missing_shard", "other_model", "truncated"),
    data="*[.][dms][aeit][fst]*",
    rank_file="__{rank}_*.distcp",
    metadata=(".metadata",),
)

NEMO_AUTOMODEL = RegisteredStrategy(
    name="nemo_automodel",
    factory=NemoAutomodel,
    supports=Supports(
        wrappers=WRAPPERS,
        kinds=("sharded",),
        checks=("corrupt", "reshard", "resume", "roundtrip"),
        models=ADAPTER_MODELS,
    ),
    storage=STORAGE,
    requires=(DIST,),
    imports=(MODULE,),
    description="NeMo Automodel CheckpointingConfig(checkpoint_dir, model_save_format='safetensors', "
    "save_consolidated=False).build(dp_rank, 0, 0).save_model(model, dir) + save_optimizer(optim, model, dir, "
    "scheduler) / load_model(model, dir/model) + load_optimizer(optim, model, dir, scheduler) on every rank",
)

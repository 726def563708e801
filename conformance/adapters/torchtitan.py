"""torchtitan's checkpointer (torchtitan 0.3.0, `torchtitan/components/checkpointer/dcp.py`):
the `CheckpointManager` its trainer saves and resumes with.

Called as torchtitan's own trainer calls it (torchtitan/trainer.py, 0.3.0):
- the optimizer and the LR scheduler are torchtitan's, built from their configs after the model
  is parallelized: "self.optimizers = config.optimizer.build(model_parts=self.model_parts)",
  "self.lr_schedulers = config.lr_scheduler.build(optimizers=self.optimizers,
  training_steps=config.training.steps)" (an `OptimizersContainer` of torch optimizers, one per
  optimizer type; an `LRSchedulersContainer` of LambdaLR warmup-stable-decay);
- "self.checkpointer = config.checkpoint.build(dataloader=..., model_parts=self.model_parts,
  optimizers=self.optimizers, lr_schedulers=self.lr_schedulers, states={"train_state": self},
  sd_adapter=..., base_folder=config.dump_folder)";
- after each training step "self.checkpointer.save(self.step, last_step=...)"; the next step
  runs "self.checkpointer.maybe_wait_for_staging()" before "self.optimizers.step()", and the
  next save awaits the one in flight (`maybe_wait_for_saving`); a restart runs
  "self.checkpointer.load(step=config.checkpoint.load_step)" (-1: the latest `step-N` folder).

The protocol's extension for a framework that owns its optimizer (conformance.strategy.owned):
`own_training` builds torchtitan's containers to the cell's optimizer (its class and param
groups, one `ParamGroupConfig` per group matching that group's parameter names exactly, the
"for-loop" implementation on the CPU: "'fused' ... (CUDA only)"), and a warmup-stable-decay
scheduler (warmup 2 of 8 steps, so the learning rate moves while the cell trains). The harness
trains them and reads the state from the torch optimizers inside.

Rows:
- torchtitan: `async_mode="disabled"` (the default): `save(step)` writes before it returns.
- torchtitan_async: `async_mode="async"` (dcp.async_save on a gloo group of its own). After
  save(step) returns, the next step's in-place update runs (after maybe_wait_for_staging, as
  the trainer orders them), then maybe_wait_for_saving, which the next save would call: the
  checkpoint must hold the state at the call.
The wrappers are the suite's (FSDP2, TP, FSDP2 + TP): torchtitan's parallelize functions apply
to its own model classes only (docs/libraries.md).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from conformance.adapters import ADAPTER_MODELS, saved_model_state, tied_names
from conformance.case import Case
from conformance.check.fused_cells import FUSED_MODEL
from conformance.layout.registry import layout_of
from conformance.models import build_model
from conformance.strategy.lifecycle import Policy
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.dcp_async import tensors_in
from conformance.strategy.storage.hf_safetensors import read_safetensors
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

DIST = "torchtitan"
# what its cells import: the checkpointer and the optimizer containers
IMPORTS = ("torchtitan.components.checkpointer", "torchtitan.components.optimizer")
LAYOUTS: tuple[tuple[str, str], ...] = (
    ("fsdp2", "shard"),
    ("tp", "tp"),
    ("fsdp2", "tp"),
    ("pp", "interleaved"),
)


def model_parts(model: nn.Module) -> list[nn.Module]:
    """The trainer's model_parts: a pipeline's stages on this rank (several under an interleaved
    schedule, the wrapper's `pipeline_parts`), else the model."""
    return list(getattr(model, "pipeline_parts", None) or [model])


# the optimizers torchtitan's OptimizersContainer builds (its factories: Adam, AdamW, DistMuon)
FACTORY_NAMES: dict[type, str] = {torch.optim.AdamW: "AdamW", torch.optim.Adam: "Adam"}
HYPERPARAMETERS = ("lr", "betas", "eps", "weight_decay", "amsgrad")
WARMUP_STEPS, TOTAL_STEPS = 2, 8
FOLDER = "checkpoint"  # config.checkpoint.folder under the dump folder (the cell's path)


class TrainStep:
    """The trainer's own entry of the checkpoint ("train_state": the trainer's step)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step = state_dict["step"]


def param_group_configs(model: nn.Module, optim: torch.optim.Optimizer) -> list[Any]:
    """The cell's optimizer as torchtitan's config says it: one group per param group,
    matching exactly its trainable parameters' names, with its hyperparameters."""
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig

    names = {id(p): n for n, p in model.named_parameters()}
    configs = []
    for group in optim.param_groups:
        fqns = [names[id(p)] for p in group["params"] if p.requires_grad]
        if not fqns:
            continue
        pattern = "^(?:" + "|".join(re.escape(n) for n in fqns) + ")$"
        kwargs = {k: group[k] for k in HYPERPARAMETERS if k in group}
        configs.append(
            ParamGroupConfig(
                pattern=pattern, optimizer_name=FACTORY_NAMES[type(optim)], optimizer_kwargs=kwargs
            )
        )
    return configs


def live_tensors(state: TrainState) -> list[torch.Tensor]:
    """What a training step changes in place: the model's floating tensors and the optimizer state."""
    return tensors_in([state.model.state_dict(), [o.state for o in state.optimizers]])


@dataclass(frozen=True)
class Torchtitan:
    """torchtitan's DCP CheckpointManager in one async mode."""

    case: Case
    async_mode: str = "disabled"

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return layout_of(self.case).build(self.case).wrap(model, ctx)

    def own_training(self, state: TrainState, ctx: RankContext) -> TrainState:
        from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer

        implementation = "fused" if torch.cuda.is_available() else "for-loop"
        config = OptimizersContainer.Config(
            param_groups=param_group_configs(state.model, state.optim), implementation=implementation
        )
        optimizers = config.build(model_parts=model_parts(state.model))  # one optimizer per part
        schedulers = LRSchedulersContainer.Config(warmup_steps=WARMUP_STEPS).build(
            optimizers=optimizers, training_steps=TOTAL_STEPS
        )
        return TrainState(state.model, optimizers, schedulers, holders=tuple(optimizers))

    def config(self) -> Any:
        """config.checkpoint of the trainer: enabled, a save at every step, this async mode."""
        from torchtitan.components.checkpointer import CheckpointManager

        return CheckpointManager.Config(enable=True, folder=FOLDER, interval=1, async_mode=self.async_mode)

    def manager(self, state: TrainState, path: Path, train_state: TrainStep) -> Any:
        return self.config().build(
            dataloader=None,
            model_parts=model_parts(state.model),
            optimizers=state.optim,
            lr_schedulers=state.scheduler,
            states={"train_state": train_state},
            sd_adapter=None,
            base_folder=str(path),
        )

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        step = state.scheduler.schedulers[0].last_epoch  # the steps taken, as the trainer counts them
        manager = self.manager(state, path, TrainStep(step))
        try:
            manager.save(step)
            if self.async_mode != "disabled":
                self.train_on(manager, state)
        finally:
            manager.close()

    def train_on(self, manager: Any, state: TrainState) -> None:
        """The next step while the save is in flight, in the trainer's order (wait for staging,
        then the optimizer's in-place update), then the wait the next save makes; the live
        state is put back for the rest of the check."""
        live = live_tensors(state)
        with torch.no_grad():
            kept = [t.clone() for t in live]
            manager.maybe_wait_for_staging()
            for tensor in live:
                tensor.add_(1.0)
            manager.maybe_wait_for_saving()
            for tensor, value in zip(live, kept, strict=True):
                tensor.copy_(value)

    def checkpointer(self, state: TrainState, path: Path, policy: Policy, ctx: RankContext) -> TitanRun:
        return TitanRun(self, state, path, policy)

    def step_folder(self, path: Path, step: int) -> Path:
        return path / FOLDER / f"step-{step}"

    def commit_files(self, path: Path, step: int) -> list[Path]:
        """DCP's coordinator writes `.metadata` in finish(), after every rank's data; torchtitan
        counts a step-N folder as a checkpoint only when it holds it (_find_load_step)."""
        return [self.step_folder(path, step) / ".metadata"]

    def sd_adapter(self) -> Any:
        """The state-dict adapter of last_save_in_hf (each torchtitan model has one)."""
        return SameNames(tied_names(build_model(self.case.model, 0)))

    def read_export(self, path: Path, step: int, policy: Policy) -> dict[str, Any]:
        """The model-only save. In Hugging Face's format (export_hf): the safetensors files in
        the step folder (torchtitan's consolidated export), read with safetensors and turned into
        the model's names by the adapter's from_hf, as torchtitan reads a Hugging Face
        checkpoint. Else the model's flattened state dict in DCP, through DCP's own conversion
        to one torch.save file, read back with weights_only=True."""
        folder = self.step_folder(path, step)
        if not policy.export_hf:
            return saved_model_state(folder, "")
        return self.sd_adapter().from_hf(read_safetensors(folder, required=True))

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        manager = self.manager(state, path, TrainStep(0))
        try:
            if not manager.load(step=-1):
                raise FileNotFoundError(
                    f"torchtitan's CheckpointManager found no step-N checkpoint in {path / FOLDER}"
                )
        finally:
            manager.close()


@dataclass(frozen=True)
class SameNames:
    """torchtitan's state-dict adapter (BaseStateDictAdapter: to_hf, from_hf, the HF reader) for
    a model whose Hugging Face definition names its tensors as it does: these models are their
    own Hugging Face definition (a real model's adapter renames, e.g. llama's tok_embeddings to
    model.embed_tokens). Tied weights as torchtitan's own adapters treat them (qwen3's with
    enable_weight_tying): to_hf leaves the tied name out, from_hf gives it the tensor it is tied
    to. No fqn_to_index_mapping: one consolidated file, as without an HF assets folder.
    tied: {name: the name it is tied to}."""

    tied: dict[str, str] = field(default_factory=dict)
    fqn_to_index_mapping: None = None
    hf_assets_path: None = None

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in state_dict.items() if k not in self.tied}

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        out = dict(hf_state_dict)
        out.update({name: out[to] for name, to in self.tied.items() if to in out})
        return out

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False) -> Any:
        from torch.distributed.checkpoint import HuggingFaceStorageReader

        return HuggingFaceStorageReader(path)


class TitanRun:
    """One run of torchtitan's CheckpointManager under a lifecycle policy (the lifecycle check,
    conformance.strategy.lifecycle): keep_latest_k, initial_load_path (the seed; its default
    initial_load_model_only=True), last_save_model_only, this row's async mode. save(step) as
    the trainer's loop calls it after each step; an asynchronous save's staging awaited before
    the next step (the trainer's maybe_wait_for_staging before its optimizer step), and at the
    end the save in flight, as the next save would (the trainer's own last save, last_step=True,
    is synchronous), then close()."""

    def __init__(self, titan: Torchtitan, state: TrainState, path: Path, policy: Policy) -> None:
        from torchtitan.components.checkpointer import CheckpointManager

        config = CheckpointManager.Config(
            enable=True,
            folder=FOLDER,
            interval=1,
            async_mode=titan.async_mode,
            keep_latest_k=policy.keep_latest,
            initial_load_path=policy.seed or None,
            last_save_model_only=policy.model_only_last,
            last_save_in_hf=policy.export_hf,
        )
        self.train_step = TrainStep(0)
        self.manager = config.build(
            dataloader=None,
            model_parts=model_parts(state.model),
            optimizers=state.optim,
            lr_schedulers=state.scheduler,
            states={"train_state": self.train_step},
            sd_adapter=titan.sd_adapter() if policy.export_hf else None,
            base_folder=str(path),
        )

    def save(self, step: int, last: bool = False) -> None:
        self.train_step.step = step
        self.manager.save(step, last_step=last)
        self.manager.maybe_wait_for_staging()

    def resume(self) -> bool:
        return bool(self.manager.load(step=-1))

    def close(self) -> None:
        self.manager.maybe_wait_for_saving()
        self.manager.close()


def synchronous(case: Case) -> Torchtitan:
    return Torchtitan(case)


def asynchronous(case: Case) -> Torchtitan:
    return Torchtitan(case, async_mode="async")


# What save(step) writes: a DCP directory, <folder>/step-<N>/, with each rank's __<rank>_0.distcp
# and the .metadata that says where every item lies.
STORAGE = OwnFormat(
    "torchtitan",
    data="*.distcp",
    rank_file="__{rank}_*.distcp",
    metadata=(".metadata",),
    damage=("flipped_bytes", "missing_metadata", "missing_shard", "other_model", "truncated"),
)

# The lifecycle scenarios (conformance.check.scenarios) it takes: every one; a kill while a save
# is in flight only where a save can be in flight (async_mode="async").
SYNCHRONOUS_LIFECYCLE = (
    "empty_folder",
    "hf_last",
    "interrupted",
    "keep_latest",
    "model_only_last",
    "seed_load",
)
SUPPORTS = Supports(
    wrappers=LAYOUTS,
    kinds=("sharded",),
    checks=("corrupt", "lifecycle", "resume", "roundtrip", "reshard", "relayout"),
    optimizers=("adam", "adamw", "adamw+groups", "adamw+sched"),
    # and the llama with fused projections checkpointed as split keys by its own state-dict hooks,
    # torchtitan's FusedSwiGLU / FusedQKVLinear pattern, which its ModelWrapper (module.state_dict)
    # is written for
    models=(*ADAPTER_MODELS, FUSED_MODEL),
    variants=(("lifecycle", SYNCHRONOUS_LIFECYCLE),),
)
ASYNC_SUPPORTS = dataclasses.replace(SUPPORTS, variants=(("lifecycle", (*SYNCHRONOUS_LIFECYCLE, "killed")),))
TORCHTITAN = RegisteredStrategy(
    name="torchtitan",
    factory=synchronous,
    supports=SUPPORTS,
    storage=STORAGE,
    requires=(DIST,),
    imports=IMPORTS,
    description="torchtitan's CheckpointManager (DCP, async_mode disabled) over its OptimizersContainer "
    "and LRSchedulersContainer, save(step) and load(step=-1) as its trainer calls them",
)
TORCHTITAN_ASYNC = RegisteredStrategy(
    name="torchtitan_async",
    factory=asynchronous,
    supports=ASYNC_SUPPORTS,
    storage=STORAGE,
    requires=(DIST,),
    imports=IMPORTS,
    description="torchtitan's CheckpointManager with async_mode='async': the next step's in-place update "
    "runs while the save is in flight, then maybe_wait_for_saving, as its trainer orders them",
)

"""Lightning Fabric's FSDPStrategy (FSDP1, state_dict_type "full" or "sharded") and
ModelParallelStrategy (FSDP2 + distributed checkpoint), driven as Fabric drives them:
`setup_environment`, `setup_module`, then `save_checkpoint` / `load_checkpoint` with the state
`{"model": ..., "optimizer": ..., "scheduler": ...}` as Fabric's docs write it.

Fabric refuses FSDP on CPU at its front end (the accelerator connector), but its strategy
objects work inside an existing process group: a cluster environment that reads rank and
world size from torch.distributed, and the world's devices as `parallel_devices`. Fabric's
"full" mode saves with offload_to_cpu=True and rank0_only=True, as it always does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from conformance.adapters import ADAPTER_MODELS, saved_model_state
from conformance.adapters.lightning_env import accelerator, existing_group_environment, fsdp1_cpu_prewrap
from conformance.case import Case
from conformance.layout.registry import layout_of
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.wrappers import fully_shard_model
from conformance.world import RankContext

FSDP1_SHARDINGS = ("full_shard", "shard_grad_op", "no_shard")
FABRIC_IMPORTS = ("lightning.fabric",)  # what the Fabric rows import (Trainer's: lightning.pytorch)


def _state(state: TrainState) -> dict[str, Any]:
    out: dict[str, Any] = {"model": state.model, "optimizer": state.optim}
    if state.scheduler is not None:
        out["scheduler"] = state.scheduler
    return out


@dataclass
class FabricStrategy:
    """One Fabric strategy object per cell and rank, made at the first `wrap`."""

    case: Case
    fabric: Any = field(default=None, init=False)

    def make(self, ctx: RankContext) -> Any:
        raise NotImplementedError

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        if self.fabric is None:
            self.fabric = self.make(ctx)
            self.fabric.setup_environment()
        return self.fabric.setup_module(self.prewrap(model.to(ctx.device), ctx))

    def prewrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return model

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.fabric.save_checkpoint(path, _state(state))

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.fabric.load_checkpoint(path, _state(state))

    def read_model_state(self, path: Path) -> dict[str, Any]:
        """Fabric's checkpoint as written: one file (full) or a DCP directory (sharded), the
        model under "model"."""
        return saved_model_state(path, "model")


class FabricFsdp(FabricStrategy):
    """FSDP1 through Fabric's FSDPStrategy (pre-wrapped on CPU: fsdp1_cpu_prewrap)."""

    def prewrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return fsdp1_cpu_prewrap(model, self.case, ctx)

    def make(self, ctx: RankContext) -> Any:
        from lightning.fabric.strategies import FSDPStrategy

        return FSDPStrategy(
            accelerator=accelerator(ctx),
            cluster_environment=existing_group_environment(),
            parallel_devices=[ctx.device] * ctx.world_size,
            process_group_backend=ctx.backend,
            state_dict_type=self.case.kind,
            sharding_strategy=self.case.sharding.upper(),
            auto_wrap_policy={nn.Linear},
        )


class FabricModelParallel(FabricStrategy):
    """FSDP2 through Fabric's ModelParallelStrategy: the parallelize function applies
    fully_shard to the model's wrap units and the root on the 1-D data-parallel mesh Fabric builds."""

    def make(self, ctx: RankContext) -> Any:
        from lightning.fabric.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(
            parallelize_fn=functools.partial(parallelize, ctx=ctx, case=self.case),
            data_parallel_size=ctx.world_size,
            tensor_parallel_size=1,
            save_distributed_checkpoint=self.case.kind == "sharded",
            process_group_backend=ctx.backend,
        )
        strategy.accelerator = accelerator(ctx)
        strategy.cluster_environment = existing_group_environment()
        strategy.parallel_devices = [ctx.device] * ctx.world_size
        return strategy


def parallelize(model: nn.Module, device_mesh: Any, ctx: RankContext, case: Case) -> nn.Module:
    """The parallelize function of a cell: the layout's own unit wrapping where it has one
    (activation checkpointing or torch.compile of each wrap unit, then fully_shard, as Lightning's
    ModelParallelStrategy guide composes them inside the parallelize function:
    `shard_on`), else fully_shard_linears; on Fabric's data-parallel mesh."""
    wrapper = layout_of(case).build(case)
    shard_on = getattr(wrapper, "shard_on", None)
    if callable(shard_on):
        return shard_on(model, device_mesh["data_parallel"], ctx)
    return fully_shard_linears(model, device_mesh, ctx)


def fully_shard_linears(model: nn.Module, device_mesh: Any, ctx: RankContext) -> nn.Module:
    """The parallelize function: fully_shard as the built-in FSDP2 wrapper applies it
    (wrappers.fully_shard_model: experts on their sub-mesh, the wrap units, the root), on
    Fabric's data-parallel mesh. Sharding every Linear of the tied model split its tied head
    from the embedding: FSDP2 refuses that ("use fully_shard([module_a, module_b])"), a fault
    of this parallelize function, not of Fabric; and without the sub-mesh the moe rows sharded
    each rank's expert over the whole world as if the experts were one tensor: no expert
    parallelism was tested."""
    return fully_shard_model(model, device_mesh["data_parallel"], ctx)


FABRIC_FSDP = RegisteredStrategy(
    name="lightning_fabric_fsdp",
    factory=FabricFsdp,  # a class is a factory Case -> strategy
    supports=Supports(
        wrappers=tuple(("fsdp1+orig", s) for s in FSDP1_SHARDINGS),  # Fabric sets use_orig_params=True
        checks=("resume", "roundtrip", "reshard", "hygiene", "corrupt"),
        models=ADAPTER_MODELS,
    ),
    storage="fabric",
    requires=("lightning",),
    imports=FABRIC_IMPORTS,
    description="lightning.fabric.strategies.FSDPStrategy save_checkpoint / load_checkpoint; on the CPU a "
    "configuration Fabric itself refuses (FSDP needs a GPU at its front end): the adapter builds the "
    "strategy object inside the world's process group",
)
FABRIC_MODEL_PARALLEL = RegisteredStrategy(
    name="lightning_fabric_model_parallel",
    factory=FabricModelParallel,
    supports=Supports(
        # FSDP2 alone, and over units that activation checkpointing or torch.compile wrapped
        # inside the parallelize function
        wrappers=(("fsdp2", "shard"), ("fsdp2+ac", "shard"), ("fsdp2+compile", "shard")),
        checks=("resume", "roundtrip", "reshard", "hygiene", "corrupt"),
        models=ADAPTER_MODELS,
    ),
    storage="fabric",
    requires=("lightning",),
    imports=FABRIC_IMPORTS,
    description="lightning.fabric.strategies.ModelParallelStrategy (FSDP2 + DCP) save / load_checkpoint",
)


def as_lightning_module(model: nn.Module, methods: dict[str, Any] | None = None) -> nn.Module:
    """The model as a LightningModule with the same submodules, parameter names and forward,
    the way a user's model is one: a subclass of the model's class and LightningModule, its
    Lightning attributes from LightningModule.__init__, everything else the model's own;
    `methods` the LightningModule hooks a user writes (training_step, ...)."""
    from lightning.pytorch import LightningModule

    cls = type(model)
    body = {"forward": cls.forward, **(methods or {})}
    lightning_cls = type(f"Lightning{cls.__name__}", (LightningModule, cls), body)
    module = lightning_cls.__new__(lightning_cls)
    LightningModule.__init__(module)
    module.__dict__.update(model.__dict__)  # the model's modules, parameters, buffers, attributes
    return module


class FittingTrainer:
    """What the strategy's checkpoint code reads of the Trainer: `trainer.state.fn`, FITTING
    as during `trainer.fit` (a Trainer itself refuses FSDP on CPU)."""

    def __init__(self) -> None:
        from lightning.pytorch.trainer.states import TrainerFn, TrainerState

        self.state = TrainerState(fn=TrainerFn.FITTING)


@dataclass
class TrainerFsdp:
    """Lightning PyTorch's FSDPStrategy driven as the Trainer drives it. Setup as in
    `FSDPStrategy.setup`: `connect` the LightningModule, `setup_environment`, the precision
    plugin's `convert_module`, `_setup_model` (on CPU the model comes pre-wrapped:
    fsdp1_cpu_prewrap). The harness's optimizer stands for what
    `configure_optimizers` returns (`strategy.optimizers`). Save as `Trainer.save_checkpoint`:
    `dump_checkpoint`'s state_dict (`lightning_module_state_dict`), optimizer_states
    (`optimizer_state`) and lr_schedulers, then `strategy.save_checkpoint`. Load as the
    checkpoint connector restores: `load_checkpoint`, `load_model_state_dict`,
    `load_optimizer_state_dict`, then each scheduler's `load_state_dict`."""

    case: Case
    strategies: dict[int, Any] = field(default_factory=dict, init=False)  # id(wrapped) -> its strategy

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
        from lightning.pytorch.strategies import FSDPStrategy

        strategy = FSDPStrategy(
            accelerator=CUDAAccelerator() if ctx.device.type == "cuda" else CPUAccelerator(),
            cluster_environment=existing_group_environment(),
            parallel_devices=[ctx.device] * ctx.world_size,
            process_group_backend=ctx.backend,
            state_dict_type=self.case.kind,
            sharding_strategy=self.case.sharding.upper(),
        )
        module = as_lightning_module(model.to(ctx.device))
        module.trainer = FittingTrainer()
        strategy.connect(module)
        strategy.setup_environment()
        strategy.model = strategy.precision_plugin.convert_module(strategy.model)
        strategy.model = strategy._setup_model(fsdp1_cpu_prewrap(strategy.model, self.case, ctx))
        strategy.barrier()
        self.strategies[id(strategy.model)] = strategy
        return strategy.model

    def _strategy(self, state: TrainState) -> Any:
        strategy = self.strategies[id(state.model)]
        strategy.optimizers = [state.optim]
        return strategy

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        import lightning.pytorch as pl

        strategy = self._strategy(state)
        checkpoint = {
            "epoch": 0,
            "global_step": 0,
            "pytorch-lightning_version": pl.__version__,
            "state_dict": strategy.lightning_module_state_dict(),
            "optimizer_states": [strategy.optimizer_state(o) for o in strategy.optimizers],
            "lr_schedulers": [] if state.scheduler is None else [state.scheduler.state_dict()],
        }
        strategy.save_checkpoint(checkpoint, path)
        strategy.barrier("Trainer.save_checkpoint")

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        strategy = self._strategy(state)
        checkpoint = strategy.load_checkpoint(path)
        strategy.load_model_state_dict(checkpoint, strict=strategy.lightning_module.strict_loading)
        if strategy.lightning_restore_optimizer:
            strategy.load_optimizer_state_dict(checkpoint)
        schedulers = [] if state.scheduler is None else [state.scheduler]
        for scheduler, scheduler_state in zip(schedulers, checkpoint["lr_schedulers"]):
            scheduler.load_state_dict(scheduler_state)

    def read_model_state(self, path: Path) -> dict[str, Any]:
        """The Trainer's checkpoint: one file with the model under "state_dict" (full), or a DCP
        directory with it under "model" (sharded, FSDPStrategy.save_checkpoint)."""
        return saved_model_state(path, "model" if path.is_dir() else "state_dict")


TRAINER_FSDP = RegisteredStrategy(
    name="lightning_fsdp",
    factory=TrainerFsdp,
    supports=Supports(
        wrappers=tuple(("fsdp1+orig", s) for s in FSDP1_SHARDINGS),  # use_orig_params=True by default
        checks=("resume", "roundtrip", "reshard", "hygiene", "corrupt"),
        models=ADAPTER_MODELS,
    ),
    storage="trainer",
    requires=("lightning",),
    imports=("lightning.pytorch",),
    description="lightning.pytorch.strategies.FSDPStrategy as the Trainer drives it "
    "(lightning_module_state_dict, optimizer_state, save_checkpoint, load_checkpoint); on the CPU a "
    'configuration the Trainer itself refuses (lightning 2.6: "The strategy `fsdp` requires a GPU '
    'accelerator"): the adapter builds '
    "the strategy object inside the world's process group",
)

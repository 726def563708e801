"""DeepSpeed's ZeRO checkpoints (deepspeed 0.19.8): `engine.save_checkpoint` and
`engine.load_checkpoint` of the engine `deepspeed.initialize` returns, at ZeRO stages 1, 2, 3,
and under AutoTP's tensor parallelism (its layouts: conformance/adapters/deepspeed_autotp.py).

Called as DeepSpeed's getting-started guide trains and checkpoints
(https://www.deepspeed.ai/getting-started/):
- "model_engine, optimizer, _, _ = deepspeed.initialize(args=cmd_args, model=net,
  model_parameters=net.parameters())", here with the cell's own torch optimizer and LR scheduler
  passed in ("optimizer: Optional: a user defined Optimizer ... This overrides any optimizer
  definition in the DeepSpeed json config"; "lr_scheduler: Optional: Learning Rate Scheduler
  Object", deepspeed.initialize's docstring) and a config of ZeRO's stage, fp32,
  "zero_allow_untested_optimizer" (a torch optimizer under ZeRO);
- the training loop: "loss = model_engine(inputs)", "model_engine.backward(loss)",
  "model_engine.step()" (which steps the optimizer and the scheduler and zeroes the gradients);
- "model_engine.save_checkpoint(args.save_dir, ckpt_id, client_state = client_sd)" on every rank
  ("all processes must call this method", its docstring), and
  "_, client_sd = model_engine.load_checkpoint(args.load_dir, args.ckpt_id)" into a fresh
  engine ("under ZeRO3, one cannot load checkpoint with engine.load_checkpoint() right after
  engine.save_checkpoint() ... reinitialize engine before load_checkpoint()"); without a tag
  both use the `latest` file save_checkpoint writes.

The protocol's extensions for a framework that owns the step and partitions the state
(conformance.strategy.protocol): `own_training` returns the engine as TrainState.engine (the
harness trains through it) and a StateView, which reads the live state through DeepSpeed's
documented accessors ("Debugging: deepspeed.utils.safe_get_full_fp32_param,
safe_get_full_optimizer_state"), parameters whole through deepspeed.zero.GatheredParameters
under ZeRO-3; the scalar entries of a flat partition's state (Adam's step) come from the torch
optimizer DeepSpeed wraps, the cell's own.

On the CPU, DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu, set here when the world has no
GPU) runs its collectives on the world's gloo group. Its communication backend loads a
shared-memory op it otherwise compiles at the first `initialize` (minutes on a busy host, behind
a file lock a killed compile leaves behind): install it prebuilt, `DS_BUILD_SHM_COMM=1 pip
install --no-cache-dir --no-build-isolation deepspeed==0.19.8`, as `python -m conformance
libraries --install` does; without it the cells
are skips that say so.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from conformance.adapters import deepspeed_autotp as autotp
from conformance.adapters.deepspeed_env import (  # noqa: F401 (FP16_CPU_REASON, installed_op: the tests' names)
    DIST,
    FP16_CPU_REASON,
    as_in_a_fresh_process,
    installed_op,
    skips_on,
    use_cpu_accelerator,
)
from conformance.adapters.deepspeed_view import LossScalerView, ZeroView
from conformance.case import Case
from conformance.models import model_class
from conformance.precision.registry import precision_of
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.training import PrecisionNotInEffect
from conformance.world import RankContext

# what its cells import: deepspeed.initialize, the checkpoint engine, the universal conversion
IMPORTS = ("deepspeed", "deepspeed.checkpoint.ds_to_universal")
# the ZeRO stages, and AutoTP's layouts over ZeRO-1 (conformance/adapters/deepspeed_autotp.py)
STAGES = {"zero1": 1, "zero2": 2, "zero3": 3} | dict.fromkeys(autotp.TP_DEGREE, autotp.ZERO_STAGE)
LAYOUTS: tuple[tuple[str, str], ...] = tuple(("deepspeed", s) for s in STAGES)


@dataclass(frozen=True)
class DeepSpeedZero:
    """One ZeRO stage (the cell's sharding: zero1, zero2, zero3)."""

    case: Case

    @property
    def stage(self) -> int:
        return STAGES[self.case.sharding]

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return model.to(ctx.device)  # the engine wraps it in own_training, with the optimizer

    def shard_group_size(self, world_size: int) -> int:
        """For the sanity check: ZeRO 1 and 2 keep every parameter whole on every rank (they
        partition the optimizer state and the gradients); ZeRO-3 partitions the parameters too;
        AutoTP splits them over its tensor-parallel group."""
        if autotp.is_autotp(self.case):
            return autotp.tp_degree(dataclasses.replace(self.case, world_size=world_size))
        return world_size if self.stage == 3 else 1

    def held(self, param: torch.Tensor) -> torch.Tensor:
        """For the sanity check: what of a parameter this rank holds. ZeRO-3 releases a
        partitioned parameter's data to an empty placeholder between forwards and keeps this
        rank's partition in `ds_tensor` (an attribute it gives every parameter it manages; a
        parameter it keeps whole has its data and counts whole)."""
        partition = getattr(param, "ds_tensor", None)
        if isinstance(partition, torch.Tensor) and param.numel() == 0:
            return partition
        return param

    def config(self) -> dict[str, Any]:
        x, _ = model_class(self.case.model).batch(torch.Generator().manual_seed(0))  # type: ignore[attr-defined]
        return (
            {
                "train_micro_batch_size_per_gpu": int(x.shape[0]),
                "gradient_accumulation_steps": 1,
                # ZeRO-3 keeps a parameter below stage3_param_persistence_threshold (1e5 elements by
                # default: every parameter of these tiny models) whole on every rank; 0 partitions all
                "zero_optimization": {"stage": self.stage}
                | ({"stage3_param_persistence_threshold": 0} if self.stage == 3 else {}),
                "zero_allow_untested_optimizer": True,
                "steps_per_print": 2**31,
            }
            | self._precision()
            | autotp.tensor_parallel_config(self.case)
        )

    def _precision(self) -> dict[str, Any]:
        """The cell's precision as DeepSpeed configures it: a model in bf16 is its "bf16" mode
        (bf16 parameters and gradients, fp32 master weights and optimizer state in the ZeRO
        partitions); a precision that computes in fp16 over fp32 parameters with a loss scaler
        is its "fp16" mode (the module in fp16, fp32 masters, its dynamic loss scaler set as the
        precision's GradScaler: the initial scale, grown after as many overflow-free steps, cut
        at the first overflow; the inputs cast to fp16, `auto_cast`); fp32 needs nothing."""
        precision = precision_of(self.case.precision)
        if precision.params is None and precision.loss_scale is None and not precision.mixed:
            return {}
        if precision.params == torch.bfloat16 and precision.loss_scale is None:
            return {"bf16": {"enabled": True}}
        scaler = dict(precision.loss_scale or ())
        if precision.params is None and precision.computes_in == torch.float16 and scaler:
            return {
                "fp16": {
                    "enabled": True,
                    "auto_cast": True,
                    "loss_scale": 0,  # dynamic
                    "initial_scale_power": int(math.log2(scaler.get("init_scale", 2.0**16))),
                    "loss_scale_window": int(scaler.get("growth_interval", 2000)),
                    "hysteresis": 1,
                    "min_loss_scale": 1,
                }
            }
        raise ValueError(f"DeepSpeed's adapter has no configuration for precision {precision.name}")

    def _fp16(self) -> bool:
        return "fp16" in self._precision()

    def own_training(self, state: TrainState, ctx: RankContext) -> TrainState:
        use_cpu_accelerator(ctx)
        import deepspeed

        as_in_a_fresh_process()
        names = {p: n for n, p in state.model.named_parameters()}
        groups = [[names[p] for p in group["params"]] for group in state.optim.param_groups]
        engine, optimizer, _, scheduler = deepspeed.initialize(
            model=state.model, optimizer=state.optim, lr_scheduler=state.scheduler, config=self.config()
        )
        autotp.check_groups(self.case, ctx.rank, state.model)
        fp16 = self._fp16()
        if fp16:
            dtypes = {p.dtype for p in engine.module.parameters() if p.is_floating_point()}
            if dtypes != {torch.float16}:
                raise PrecisionNotInEffect(f"DeepSpeed's fp16 mode left the module's parameters in {dtypes}")
        # by name: AutoTP replaces the parameters of the layers it splits with their shards
        view_type = autotp.AutoTpView if autotp.is_autotp(self.case) else ZeroView
        view = view_type(engine, state.model, autotp.by_name(state.model, groups))
        # fp16: DeepSpeed's own loss scaler, which its checkpoint carries, in the GradScaler's place
        scaler = LossScalerView(engine) if fp16 else None
        return TrainState(state.model, optimizer, scheduler, holders=(view,), engine=engine, scaler=scaler)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        state.engine.save_checkpoint(str(path))  # type: ignore[union-attr]

    def checkpointer(self, state: TrainState, path: Path, policy: Any, ctx: RankContext) -> DeepSpeedRun:
        return DeepSpeedRun(state.engine, path)

    def step_folder(self, path: Path, step: int) -> Path:
        return path / step_tag(step)

    def commit_files(self, path: Path, step: int) -> list[Path]:
        return [path / "latest"]

    # the tag load_checkpoint reads; None: the one the `latest` file save_checkpoint wrote names
    load_tag: ClassVar[str | None] = None

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        # "None if loading the checkpoint failed" (its docstring): nothing loaded, say so
        loaded, _ = state.engine.load_checkpoint(str(path), tag=self.load_tag)  # type: ignore[union-attr]
        if loaded is None:
            raise FileNotFoundError(
                f"DeepSpeed's load_checkpoint found no checkpoint (tag {self.load_tag}) in {path}"
            )


class DeepSpeedRun:
    """One run's checkpoints as DeepSpeed keeps them (the lifecycle check): `save_checkpoint(dir,
    tag)` after each step with the tag its default names the step by ("global_step{N}"), and on
    a restart `load_checkpoint(dir)` with no tag, which reads the `latest` file rank 0 writes
    after its own files (engine.py save_checkpoint: "# Save latest checkpoint tag"). DeepSpeed
    has no retention of its own, no seed load and no model-only last save: it takes the
    interrupted save and the empty folder."""

    def __init__(self, engine: Any, path: Path) -> None:
        self.engine, self.path = engine, path

    def save(self, step: int, last: bool = False) -> None:
        self.engine.save_checkpoint(str(self.path), tag=step_tag(step))

    def resume(self) -> bool:
        loaded, _ = self.engine.load_checkpoint(str(self.path))  # "None if loading the checkpoint failed"
        return loaded is not None

    def close(self) -> None:
        pass


def step_tag(step: int) -> str:
    return f"global_step{step}"


UNIVERSAL_TAG = "conformance"


@dataclass(frozen=True)
class DeepSpeedUniversal(DeepSpeedZero):
    """The universal checkpoint, DeepSpeed's way to load at another data-parallel size
    (https://www.deepspeed.ai/tutorials/universal-checkpointing/: "1. Convert ZeRO checkpoint
    into a universal format using ds_to_universal.py ... 2. Resume training with the universal
    checkpoint ... load_universal"), called as DeepSpeed's own test of it does
    (tests/unit/checkpoint/test_universal_checkpoint.py: save_checkpoint(dir, tag=...,
    client_state={UNIVERSAL_CHECKPOINT_INFO: {}}), rank 0 converts <tag> into <tag>_universal
    with ds_to_universal's main, every engine's config has "checkpoint": {"load_universal":
    True}, and load_checkpoint(dir, tag="<tag>_universal"))."""

    load_tag: ClassVar[str | None] = f"{UNIVERSAL_TAG}_universal"

    def config(self) -> dict[str, Any]:
        return {**super().config(), "checkpoint": {"load_universal": True}}

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from types import SimpleNamespace

        import torch.distributed as dist
        from deepspeed.checkpoint import UNIVERSAL_CHECKPOINT_INFO
        from deepspeed.checkpoint.ds_to_universal import main as convert_to_universal

        engine = state.engine
        # AutoTP: the engine writes its own universal-checkpoint info (how each parameter is split
        # over the tensor-parallel ranks), which this client_state would replace (its AutoTP
        # tests pass none)
        client_state = {} if autotp.carries_its_own_info(engine) else {UNIVERSAL_CHECKPOINT_INFO: {}}
        engine.save_checkpoint(str(path), tag=UNIVERSAL_TAG, client_state=client_state)  # type: ignore[union-attr]
        dist.barrier()
        if ctx.rank == 0:
            convert_to_universal(
                SimpleNamespace(
                    input_folder=str(path / UNIVERSAL_TAG),
                    output_folder=str(path / f"{UNIVERSAL_TAG}_universal"),
                    num_extract_workers=1,
                    num_merge_workers=1,
                    keep_temp_folder=False,
                    strict=True,
                    inject_missing_state=False,
                )
            )
        dist.barrier()


# What save_checkpoint writes under <dir>/<tag>/: torch.save files (the engine's
# mp_rank_00_model_states.pt, each rank's zero_pp_rank_<r>_mp_rank_00_optim_states.pt, ZeRO-3's
# per-rank model states too) beside the zero_to_fp32.py script it copies there, and <dir>/latest
STORAGE = OwnFormat(
    "deepspeed",
    data="*.pt",
    rank_file="*zero_pp_rank_{rank}_*",
    damage=("flipped_bytes", "missing_shard", "other_model", "truncated"),
)

ZERO = RegisteredStrategy(
    name="deepspeed",
    factory=DeepSpeedZero,
    supports=Supports(
        wrappers=(),
        layouts=LAYOUTS,
        kinds=("sharded",),
        checks=("corrupt", "lifecycle", "resume", "roundtrip"),
        optimizers=("adam", "adamw", "adamw+groups", "adamw+sched", "sgd"),
        # each model feature alone (tied, buffers and a frozen layer, an idle parameter, a 0-dim
        # parameter, an int buffer); the model in bf16 (DeepSpeed's bf16 mode), fp16 compute over
        # fp32 masters with a loss scaler (its fp16 mode)
        models=("bn_frozen", "frozen_idle", "mlp", "mlp_int_buffer", "mlp_scalar_param", "tied_transformer"),
        precisions=("bf16_pure", "fp16_mp", "fp32"),
        variants=(("lifecycle", ("empty_folder", "interrupted")),),
    ),
    storage=STORAGE,
    requires=(DIST,),
    imports=IMPORTS,
    description="DeepSpeed's engine (deepspeed.initialize with the cell's optimizer and scheduler, ZeRO "
    "stage 1, 2 or 3 or AutoTP over ZeRO-1, fp32, its bf16 mode or its fp16 mode with its loss scaler): save_checkpoint and load_checkpoint into a fresh engine, as its guide calls them",
    skips_on=skips_on,
)

UNIVERSAL = RegisteredStrategy(
    name="deepspeed_universal",
    factory=DeepSpeedUniversal,
    supports=dataclasses.replace(ZERO.supports, checks=("reshard", "resume", "roundtrip")),
    storage=OwnFormat("deepspeed_universal", data="*.pt"),
    requires=(DIST,),
    imports=IMPORTS,
    description="DeepSpeed's universal checkpoint: save_checkpoint, ds_to_universal on rank 0, and "
    "load_checkpoint of the converted tag by an engine configured with load_universal, as its tutorial and "
    "its own test do; the documented way to load at another data-parallel size",
    skips_on=skips_on,
)

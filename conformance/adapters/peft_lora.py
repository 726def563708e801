"""PEFT: a LoRA adapter trained under FSDP2, FSDP1 (use_orig_params) or DDP, checkpointed as PEFT
saves one, the adapter alone, and loaded back as PEFT loads one.

Called as PEFT 0.21's documentation tells a user to:
- the trainable model is `get_peft_model(model, LoraConfig(...))` (every nn.Linear of the cell's
  model a LoRA target, r=2), then wrapped by the cell's layout, as a training script wraps it;
  the optimizer holds what PEFT leaves trainable (the LoRA weights), as it is documented to;
- a save gathers the full state dict with torch's `get_model_state_dict(full_state_dict=True,
  cpu_offload=True)` (what Accelerate and the Trainer hand PEFT under FSDP) and rank 0 writes the
  adapter with `PeftModel.save_pretrained(dir, state_dict=...)`: adapter_model.safetensors and
  adapter_config.json, the adapter's weights only; the optimizer's full state dict and the
  scheduler go beside it (optimizer.pt, scheduler.pt), as the Trainer keeps them;
- a load reads the adapter with `peft.utils.load_peft_weights(dir)` and sets it with
  `set_peft_model_state_dict(model, weights)` on every rank (PEFT's own loader, which
  PeftModel.load_adapter calls; into an FSDP1 root under FULL_STATE_DICT, as Accelerate's
  adapter-only load does), the optimizer's with `set_optimizer_state_dict(full_state_dict=True)`.

The base model: a user builds it from its published weights (`from_pretrained` of the base), which
training never changes (PEFT freezes them). The harness builds every fresh model with other
weights, so the row stands the published base in: rank 0 writes the frozen base weights under
the plain model's own names (base_model.safetensors, PEFT's `base_model.model.` prefix and
`.base_layer` segment taken off) and a load reads them into the plain model before it is wrapped
(`load_before_wrap`, strict=True), as a user's from_pretrained of the base would. The checks
damage only PEFT's file (adapter_model.safetensors), never that stand-in.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from conformance.adapters import ADAPTER_MODELS
from conformance.case import Case
from conformance.layout.registry import layout_of
from conformance.models import model_class
from conformance.strategy.protocol import TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

DIST = "peft"
ADAPTER = "adapter_model.safetensors"  # PEFT's name for the adapter's weights
BASE = "base_model.safetensors"  # the published base model's stand-in (see above)
OPTIMIZER, SCHEDULER = "optimizer.pt", "scheduler.pt"  # the Trainer's names for them
PEFT_PREFIX, BASE_LAYER = "base_model.model.", ".base_layer."  # PEFT's names around a base weight


def lora_config(model: nn.Module):  # type: ignore[no-untyped-def]
    """Every nn.Linear of the plain model a LoRA target (by its full name), rank 2; not the
    out_proj of an nn.MultiheadAttention, whose forward reads that Linear's weight and never
    calls it: an adapter there would never get a gradient (an idle parameter, which the
    frozen_idle model tests on purpose)."""
    from peft import LoraConfig

    inside_attention = {
        f"{name}.{child}" if name else child
        for name, module in model.named_modules()
        if isinstance(module, nn.MultiheadAttention)
        for child, _ in module.named_children()
    }
    targets = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name not in inside_attention
    ]
    return LoraConfig(r=2, lora_alpha=4, lora_dropout=0.0, target_modules=targets)


def peft_model_in(model: nn.Module):  # type: ignore[no-untyped-def]
    """The PeftModel inside a wrapped model (FSDP1 and DDP hold it as a child; FSDP2 is it)."""
    from peft import PeftModel

    for module in model.modules():
        if isinstance(module, PeftModel):
            return module
    raise TypeError(f"no PeftModel in {type(model).__name__}: the row's wrap makes one")


def load_target(model: nn.Module) -> tuple[nn.Module, contextlib.AbstractContextManager[object]]:
    """What set_peft_model_state_dict loads into, as Accelerate's adapter-only load calls it: an
    FSDP1 root under FSDP.state_dict_type(FULL_STATE_DICT) (its state dict has the model's own
    names there; loading into the PeftModel inside it would run its units' hooks before the
    root's); else the PeftModel (FSDP2 shards it in place; DDP holds it as `module`)."""
    from torch.distributed.fsdp import FullyShardedDataParallel, StateDictType

    if isinstance(model, FullyShardedDataParallel):
        return model, FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT)
    return peft_model_in(model), contextlib.nullcontext()


def base_weights(full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The base model's weights under the plain model's names: what its published checkpoint holds
    (each tensor its own copy: a tied pair shares memory in a DDP model's state dict, which
    safetensors refuses; the plain model's strict load ties them again)."""
    return {
        key.removeprefix(PEFT_PREFIX).replace(BASE_LAYER, "."): value.detach().clone()
        for key, value in full.items()
        if ".lora_" not in key
    }


@dataclass(frozen=True)
class PeftAdapter:
    case: Case

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from peft import get_peft_model

        peft_model = get_peft_model(model, lora_config(model))
        return layout_of(self.case).build(self.case).wrap(peft_model, ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from safetensors.torch import save_file
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        # cpu_offload moves what a GPU holds to the CPU; on the CPU there is nothing to move (and
        # FSDP1's offload_to_cpu crashes there: the finding fsdp1-full-offload-cpu-crash)
        options = StateDictOptions(full_state_dict=True, cpu_offload=ctx.device.type != "cpu")
        full = get_model_state_dict(state.model, options=options)  # a collective
        optim = get_optimizer_state_dict(state.model, state.optim, options=options)
        if ctx.rank == 0:
            peft_model_in(state.model).save_pretrained(str(path), state_dict=full)
            save_file(base_weights(full), str(path / BASE))
            torch.save(optim, path / OPTIMIZER)
            if state.scheduler is not None:
                torch.save(state.scheduler.state_dict(), path / SCHEDULER)
        torch.distributed.barrier()

    def load_before_wrap(self, model: nn.Module, path: Path, ctx: RankContext) -> None:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(str(path / BASE)), strict=True)

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        target, full_state_dict = load_target(state.model)
        with full_state_dict:
            # its load_state_dict(strict=False) result is returned, not raised on (PEFT's own
            # load_adapter warns at most): what it did not load shows in the comparison
            set_peft_model_state_dict(target, load_peft_weights(str(path)))
        optim = torch.load(path / OPTIMIZER, weights_only=True)
        set_optimizer_state_dict(
            state.model, state.optim, optim, options=StateDictOptions(full_state_dict=True)
        )
        if state.scheduler is not None:
            state.scheduler.load_state_dict(torch.load(path / SCHEDULER, weights_only=True))


PEFT_LORA = RegisteredStrategy(
    name="peft_lora",
    factory=PeftAdapter,
    supports=Supports(
        wrappers=(("fsdp2", "shard"), ("fsdp1+orig", "full_shard"), ("ddp", "replicate")),
        kinds=("full",),
        checks=("corrupt", "reshard", "resume", "roundtrip"),
        # not the expert-parallel model: each rank's expert under one name, which one adapter
        # file of the whole model cannot hold
        models=tuple(m for m in ADAPTER_MODELS if not getattr(model_class(m), "expert_parallel", False)),
    ),
    storage=OwnFormat("peft_adapter", data=ADAPTER),
    requires=(DIST,),
    imports=("peft",),
    description="PEFT LoRA (get_peft_model, every Linear a target): rank 0's PeftModel.save_pretrained(dir, "
    "state_dict=...) of the full state dict get_model_state_dict gathers (the adapter alone), the "
    "optimizer's full state dict and the scheduler beside it; load_peft_weights + "
    "set_peft_model_state_dict on every rank, set_optimizer_state_dict(full_state_dict=True). The "
    "frozen base weights stand in for the published base model (base_model.safetensors, loaded "
    "into the plain model before it is wrapped, as from_pretrained of the base would)",
)

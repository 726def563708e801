"""PEFT's merged export: a LoRA adapter trained under FSDP2, FSDP1 (use_orig_params) or DDP,
merged into its base model and exported as a plain transformers model, which a user loads with
`from_pretrained` and no PEFT.

Called as PEFT 0.21's documentation tells a user to:
- the base is a transformers model: the transformers row's PreTrainedModel holding the cell's
  plain model (a tie declared as a transformers model declares it, `_tied_weights_keys`,
  `tie_word_embeddings`, its input and output embeddings named); the trainable model is
  `get_peft_model(base, lora_config(base))` (the adapter row's: every nn.Linear a target, r=2),
  wrapped by the cell's layout;
- a save gathers the full state dict with `get_model_state_dict(full_state_dict=True)` and rank 0
  writes the adapter, `PeftModel.save_pretrained(dir/adapter, state_dict=...)` (as the adapter
  row, as Trainer.save_model under FSDP with FULL_STATE_DICT: PEFT's accelerate/fsdp.md), then
  merges it as PEFT's LoRA guide does, without FSDP: the base from its published weights,
  `PeftModel.from_pretrained(base, dir/adapter)`, `merge_and_unload()`, and `save_pretrained(dir)`
  of the merged model (the checkpoint guide's "Merge the weights"): model.safetensors and
  config.json. The published base is, as in the adapter row, the frozen base weights of the
  gathered state dict under the plain model's names, loaded strict into a fresh PreTrainedModel.

What the hygiene check holds the export to (its only check: a merged model is no training
checkpoint to resume from):
- `read_model_state`: `from_pretrained(dir)` of the export, its plain model's state dict;
- `export_of`: PEFT's own merge of the saving world's canonical state (the harness's own gather,
  not the state-dict API) on an unsharded PeftModel in one process: the sharded run's export is
  compared bitwise with the unsharded merge of the same trained state;
- `export_problems`: the transformers row's, the files' key set that transformers writes for the
  plain model itself (no `base_model.model.` prefix, no `.base_layer`, no `lora_` key, none twice
  or missing) and the reloaded model tied as the plain model is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from conformance.adapters.peft_lora import DIST, PEFT_LORA, base_weights, lora_config, peft_model_in
from conformance.adapters.transformers import config_of, export_problems, pretrained_class, read_export
from conformance.case import Case
from conformance.check.snapshot import Snapshot
from conformance.layout.registry import layout_of
from conformance.strategy.protocol import StateDict, TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

ADAPTER_DIR = "adapter"  # PEFT's adapter, beside the merged model's files


def pretrained(model: nn.Module, model_name: str) -> nn.Module:
    """The PreTrainedModel of the transformers row holding `model` (the cell's plain model). The
    layouts read the wrap units from the model they wrap (a PeftModel hands attribute look-ups on
    to its base model; a PreTrainedModel does not hand them on to `model`): it names the plain
    model's."""
    base = pretrained_class()(config_of(model_name))
    base.model = model
    base.wrap_units = getattr(model, "wrap_units", (nn.Linear,))
    return base


def published_base(model_name: str, full: StateDict) -> nn.Module:
    """The base model as `from_pretrained` of its published weights gives it: the frozen weights of
    the gathered state dict (PEFT's prefix and `.base_layer` taken off), loaded strict."""
    base = pretrained_class()(config_of(model_name))
    base.load_state_dict(base_weights(full), strict=True)
    return base


@dataclass(frozen=True)
class PeftMergedExport:
    case: Case

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from peft import get_peft_model

        base = pretrained(model, self.case.model)
        return layout_of(self.case).build(self.case).wrap(get_peft_model(base, lora_config(base)), ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # cpu_offload where the model lives on a GPU only (FSDP1's offload_to_cpu crashes on the
        # CPU: the finding fsdp1-full-offload-cpu-crash)
        options = StateDictOptions(full_state_dict=True, cpu_offload=ctx.device.type != "cpu")
        full = get_model_state_dict(state.model, options=options)  # a collective
        if ctx.rank == 0:
            adapter = str(path / ADAPTER_DIR)
            peft_model_in(state.model).save_pretrained(adapter, state_dict=full)
            self.merged(published_base(self.case.model, full), adapter).save_pretrained(str(path))
        torch.distributed.barrier()

    def merged(self, base: nn.Module, adapter: str) -> nn.Module:
        """The base with the saved adapter merged in, as PEFT's LoRA guide merges one."""
        from peft import PeftModel

        return PeftModel.from_pretrained(base, adapter).merge_and_unload()

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        raise NotImplementedError(
            "a merged export is loaded as a plain model (read_model_state), not resumed"
        )

    def read_model_state(self, path: Path) -> StateDict:
        return read_export(path)

    def export_problems(self, path: Path) -> list[str]:
        return export_problems(path, self.case.model)

    def export_of(self, expected: Snapshot) -> Snapshot:
        """PEFT's merge of the trained state on an unsharded PeftModel, in the plain model's names:
        every parameter of a fresh PeftModel set from the saving world's canonical state (the same
        names, all of them), its persistent buffers likewise, then `merge_and_unload()`."""
        from peft import get_peft_model

        base = pretrained_class()(config_of(self.case.model))
        peft = get_peft_model(base, lora_config(base))
        params = dict(peft.named_parameters())
        given = {k.removeprefix("param/"): v for k, v in expected.items() if k.startswith("param/")}
        if given.keys() != params.keys():
            unlike = sorted(given.keys() ^ params.keys())
            raise KeyError(f"the trained state's parameters are not the PeftModel's: {unlike[:4]}")
        with torch.no_grad():
            for name, value in given.items():
                params[name].copy_(value)
            for name, buffer in peft.named_buffers():
                if f"buffer/{name}" in expected:
                    buffer.copy_(expected[f"buffer/{name}"])
        plain = peft.merge_and_unload().model
        own = plain.state_dict()
        out: Snapshot = {f"param/{n}": p.detach().clone() for n, p in plain.named_parameters()}
        out.update((f"buffer/{n}", b.detach().clone()) for n, b in plain.named_buffers() if n in own)
        return out


PEFT_LORA_MERGED = RegisteredStrategy(
    name="peft_lora_merged",
    factory=PeftMergedExport,
    supports=Supports(
        wrappers=PEFT_LORA.supports.wrappers,
        kinds=("full",),
        checks=("hygiene",),
        models=PEFT_LORA.supports.models,  # the adapter row's: one export holds one whole model
    ),
    storage=OwnFormat("peft_merged", data="model.safetensors"),
    requires=(DIST, "transformers"),
    imports=("peft", "transformers.modeling_utils"),
    description="PEFT LoRA merged and exported: rank 0's PeftModel.save_pretrained(dir/adapter, state_dict=...) "
    "of the full state dict get_model_state_dict gathers, then PeftModel.from_pretrained(base, dir/adapter)"
    ".merge_and_unload().save_pretrained(dir) of a transformers base holding the plain model; read back with "
    "from_pretrained and no PEFT, its key set and ties held to transformers' own export of the plain model, "
    "its values to PEFT's merge of the trained state in one process",
)

"""Hugging Face transformers: a model gathered from FSDP2 (or DDP) as a full state dict, exported
with `PreTrainedModel.save_pretrained` and loaded back with `from_pretrained`, as its Trainer
saves a model it trained under FSDP with a full state dict.

Called as transformers 5.x tells a user to:
- Trainer.save_model under FSDP with FULL_STATE_DICT gathers the model's full state dict on the
  main process and calls `self.model.save_pretrained(output_dir, state_dict=state_dict)` (its
  `_save`); the adapter gathers it with torch's documented `get_model_state_dict(model,
  options=StateDictOptions(full_state_dict=True, cpu_offload=True))` and exports it on rank 0 the
  same way, safetensors files and config.json;
- the optimizer and the scheduler go beside it as Trainer keeps them: `optimizer.pt` (here the
  optimizer's full state dict, get_optimizer_state_dict) and `scheduler.pt`, torch.save by rank 0;
- a load is `from_pretrained(dir)` on every rank (what a restarted or an inference process runs),
  its state_dict() set into the wrapped model with `set_model_state_dict(full_state_dict=True)`,
  the optimizer's with `set_optimizer_state_dict(full_state_dict=True)`.

transformers needs a PreTrainedModel: `pretrained_class` puts the cell's plain model inside one
(its config names the model; a model whose weights are tied, the tied transformer, declares the
tie as a transformers model does, `_tied_weights_keys` with `tie_word_embeddings`), the way a
user's own architecture becomes a transformers model. The hygiene check reads the export in one
process with `from_pretrained` and loads it into the plain model, strict=True; `export_problems`
holds the files' key set to the one transformers writes for the plain model itself (no key twice,
none missing or added) and the reloaded model to the plain model's ties.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from conformance.adapters import ADAPTER_MODELS, tied_names
from conformance.case import Case
from conformance.layout.registry import layout_of
from conformance.models import build_model, model_class
from conformance.strategy.protocol import StateDict, TrainState
from conformance.strategy.registry import RegisteredStrategy, Supports
from conformance.strategy.storage.own import OwnFormat
from conformance.world import RankContext

DIST = "transformers"
PREFIX = "model."  # the plain model's place inside the PreTrainedModel
OPTIMIZER, SCHEDULER = "optimizer.pt", "scheduler.pt"  # Trainer's names for them


@functools.cache
def pretrained_class() -> type:
    """A PreTrainedModel holding one of the suite's plain models (its config's `model_name`)."""
    from transformers import PretrainedConfig, PreTrainedModel

    class ConformanceConfig(PretrainedConfig):
        model_type = "conformance"

        def __init__(
            self, model_name: str = "mlp", tied: dict[str, str] | None = None, **kwargs: Any
        ) -> None:
            self.model_name, self.tied = model_name, dict(tied or {})
            kwargs.setdefault("tie_word_embeddings", bool(self.tied))
            super().__init__(**kwargs)

    class ConformanceModel(PreTrainedModel):
        config_class = ConformanceConfig
        base_model_prefix = "model"

        def __init__(self, config: ConformanceConfig) -> None:
            super().__init__(config)
            self.model = build_model(config.model_name, 0)
            self._tied_weights_keys = {PREFIX + k: PREFIX + v for k, v in config.tied.items()}
            self.post_init()

        def get_input_embeddings(self) -> nn.Module:
            """The module whose weight a tie shares (a tied transformers model names its input
            embeddings; PEFT asks for them to find the layers tied to them)."""
            if not self.config.tied:
                return super().get_input_embeddings()
            return self.model.get_submodule(next(iter(self.config.tied.values())).rpartition(".")[0])

        def get_output_embeddings(self) -> nn.Module | None:
            """The module that holds the tied copy (a tied model's output embeddings), or None."""
            if not self.config.tied:
                return None
            return self.model.get_submodule(next(iter(self.config.tied)).rpartition(".")[0])

        def _init_weights(self, module: nn.Module) -> None:
            pass  # the plain model's own initialisation; every weight is then loaded

        def forward(self, *args: Any) -> Any:
            return self.model(*args)

    return ConformanceModel


def config_of(model_name: str) -> Any:
    cls = pretrained_class()
    return cls.config_class(model_name=model_name, tied=tied_names(build_model(model_name, 0)))


def read_export(path: Path) -> StateDict:
    """The plain model's state dict of an export, as `from_pretrained` gives it (one process)."""
    loaded = pretrained_class().from_pretrained(str(path))
    return {k.removeprefix(PREFIX): v for k, v in loaded.state_dict().items()}


def export_keys(path: Path) -> list[str]:
    """Every tensor name an export's safetensors files hold (a name two files hold, twice)."""
    from safetensors import safe_open

    keys: list[str] = []
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            keys += list(f.keys())
    return keys


@functools.cache
def own_export_keys(model_name: str) -> tuple[str, ...]:
    """The tensor names transformers' own `save_pretrained` writes for the plain model (in one
    process, no wrapper): the plain model's state-dict keys, a tied copy left to the tie."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        pretrained_class()(config_of(model_name)).save_pretrained(tmp)
        return tuple(sorted(export_keys(Path(tmp))))


def export_problems(path: Path, model_name: str) -> list[str]:
    """What keeps an export from the form transformers' own export of the plain model takes: a
    key its files hold twice, lack or add (a duplicate or a missing key is one even where every
    value is right), and a model that `from_pretrained` gives back with other ties than the
    plain model's."""
    keys, own = export_keys(path), own_export_keys(model_name)
    plain = build_model(model_name, 0)
    problems = []
    left_to_ties = {PREFIX + k for k in plain.state_dict()} - set(own)
    if not left_to_ties <= {PREFIX + k for k in tied_names(plain)}:
        problems.append(
            f"transformers' own export of the plain model lacks {sorted(left_to_ties)[:3]}, no tie"
        )
    twice = sorted({k for k in keys if keys.count(k) > 1})
    for what, names in (
        ("held twice", twice),
        ("missing", sorted(set(own) - set(keys))),
        ("not the plain model's", sorted(set(keys) - set(own))),
    ):
        if names:
            problems.append(f"export keys {what}: {len(names)}, e.g. {names[:3]}")
    loaded = pretrained_class().from_pretrained(str(path))
    ties, plain_ties = tied_names(loaded.model), tied_names(plain)
    if ties != plain_ties:
        problems.append(f"the reloaded model's ties are {ties}; the plain model's, {plain_ties}")
    return problems


@dataclass(frozen=True)
class TransformersExport:
    case: Case

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        return layout_of(self.case).build(self.case).wrap(model, ctx)

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model = get_model_state_dict(state.model, options=options)  # a collective
        optim = get_optimizer_state_dict(state.model, state.optim, options=options)
        if ctx.rank == 0:
            export = pretrained_class()(config_of(self.case.model))
            export.save_pretrained(str(path), state_dict={PREFIX + k: v for k, v in model.items()})
            torch.save(optim, path / OPTIMIZER)
            if state.scheduler is not None:
                torch.save(state.scheduler.state_dict(), path / SCHEDULER)
        torch.distributed.barrier()

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(state.model, read_export(path), options=options)
        optim = torch.load(path / OPTIMIZER, weights_only=True)
        set_optimizer_state_dict(state.model, state.optim, optim, options=options)
        if state.scheduler is not None:
            state.scheduler.load_state_dict(torch.load(path / SCHEDULER, weights_only=True))

    def read_model_state(self, path: Path) -> StateDict:
        return read_export(path)

    def export_problems(self, path: Path) -> list[str]:
        return export_problems(path, self.case.model)


TRANSFORMERS = RegisteredStrategy(
    name="transformers",
    factory=TransformersExport,
    supports=Supports(
        wrappers=(("fsdp2", "shard"), ("ddp", "replicate")),
        kinds=("full",),
        checks=("hygiene", "resume", "roundtrip"),
        # not the expert-parallel model (moe: each rank's expert under one name), which a
        # PreTrainedModel, one whole model in one export, cannot hold by construction
        models=tuple(m for m in ADAPTER_MODELS if not getattr(model_class(m), "expert_parallel", False)),
    ),
    storage=OwnFormat("transformers", data="*.safetensors"),
    requires=(DIST,),
    imports=("transformers.modeling_utils",),
    description="transformers save_pretrained(dir, state_dict=...) on rank 0 of the full state dict "
    "get_model_state_dict gathers (Trainer.save_model under FSDP), the optimizer's full state dict and "
    "the scheduler beside it (optimizer.pt, scheduler.pt); from_pretrained(dir) on every rank and "
    "set_model_state_dict / set_optimizer_state_dict(full_state_dict=True) to load",
)

"""The hygiene check: a full checkpoint must be consumable by the plain, unwrapped model.

The strategy saves in its world; then, in a one-rank world (one process, as export or
inference code runs), its `read_model_state(path)` reads the model state dict the checkpoint
holds, and the check asks: does it hold model tensors at all (an empty one shipped in a
major framework's FSDP strategy); no wrapper prefixes (`module.`, `_fsdp_wrapped_module.`,
`_forward_module.`, `_orig_mod.`, `_checkpoint_wrapped_module.`) and no flat parameters;
plain tensors, not DTensors or ShardedTensors; the dtype of the model's own tensors (a bf16
mixed-precision checkpoint must hold the fp32 weights); no non-persistent buffer; does it load
into the plain model with strict=True; and are the values those the saving world trained,
bitwise: the parameters and the persistent buffers (a buffer a wrapper kept in a lower precision
for compute, exactly upcast). A strategy whose export is not the trained model itself says what
it must hold (`export_of`: an adapter merged into its base) and checks the export's own form
(`export_problems`: its files' key set, the reloaded model's ties).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from conformance.case import Case
from conformance.check.base import CaseCells, Check, Feature, Under
from conformance.check.compare import compare_states
from conformance.check.fused_cells import HYGIENE_FUSED_SLICE
from conformance.check.phases import PhaseError, Phases, observed_of
from conformance.check.roundtrip import StrategyFactory, limit_lines
from conformance.check.slices import LAYOUT_WRAPPERS, MAIN_WRAPPERS, MODELS, PP_FSDP_WRAPPERS, Slice
from conformance.check.snapshot import Snapshot
from conformance.check.transfer import saved
from conformance.layout.builtin import builtin_strategy
from conformance.models import build_model
from conformance.observed import verdict
from conformance.outcome import Outcome
from conformance.precision.registry import mixed_precisions
from conformance.strategy.under_test import strategy_under_test
from conformance.world import RankContext
from conformance.world.rank import one_process

# A wrapper's name segment, whichever wrapper: a private attribute that holds the wrapped module
# (`_fsdp_wrapped_module.`, `_checkpoint_wrapped_module.`, torch.compile's `_orig_mod.`, and any
# framework's own, such as a `_forward_module.`), matched by its shape rather than by a list of
# wrappers' names.
WRAPPER_SEGMENT = re.compile(r"(?:^|\.)_\w*mod(?:ule)?\.")


@dataclass(frozen=True)
class InspectSpec:
    case: Case
    directory: str
    expected: Snapshot  # the saving world's canonical state
    buffer_copies: tuple[Snapshot, ...] = ()  # each saving rank's own buffers
    strategy_factory: StrategyFactory = field(default=builtin_strategy)


def _non_persistent(model: torch.nn.Module) -> set[str]:
    return {
        f"{prefix}.{name}" if prefix else name
        for prefix, module in model.named_modules()
        for name in module._non_persistent_buffers_set
    }


def hygiene_problems(
    state: dict[str, Any], plain: torch.nn.Module, expected: Snapshot, copies: tuple[Snapshot, ...] = ()
) -> list[str]:
    """What keeps `state` from being the plain model's own state dict with the trained values.
    copies: each saving rank's own buffers; a buffer may be any rank's copy (replicas' running
    stats differ, and a full checkpoint holds one rank's), bitwise."""
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        return [f"the checkpoint holds no model tensors at all ({len(state)} keys)"]
    problems = []
    prefixed = sorted(
        k for k in state if k.startswith("module.") or "_flat_param" in k or WRAPPER_SEGMENT.search(k)
    )
    if prefixed:
        problems.append(
            f"{len(prefixed)} keys carry a wrapper prefix or a flat parameter, e.g. {prefixed[:3]}"
        )
    odd = sorted(
        k for k, v in tensors.items() if type(v) is not torch.Tensor and type(v).__name__ != "Parameter"
    )
    if odd:
        problems.append(
            f"not plain tensors: {', '.join(f'{k} ({type(tensors[k]).__name__})' for k in odd[:3])}"
        )
    own = plain.state_dict()
    wrong_dtype = [k for k, v in tensors.items() if k in own and v.dtype != own[k].dtype]
    for key in wrong_dtype[:3]:
        problems.append(f"{key} is saved as {tensors[key].dtype}; the model's is {own[key].dtype}")
    hidden = sorted(_non_persistent(plain) & state.keys())
    if hidden:
        problems.append(f"non-persistent buffers saved: {hidden}")
    try:
        plain.load_state_dict(state, strict=True)
    except (RuntimeError, KeyError, TypeError) as exc:
        problems.append("strict load into the plain model: " + " ".join(str(exc).split())[:400])
        return problems
    # a load pre-hook may take keys the model's own state dict never shows (a fused weight's live
    # name beside the split keys its state-dict hook saves): strict=True says nothing then
    unlike = sorted(set(state) ^ own.keys())
    if unlike:
        problems.append(f"keys unlike the plain model's own state dict (a load hook took them): {unlike[:4]}")
    got = {f"param/{name}": p.detach().clone() for name, p in plain.named_parameters()}
    got.update(
        (f"buffer/{name}", b.detach().clone()) for name, b in plain.named_buffers() if name in own
    )  # the persistent buffers: a counter or running stats the checkpoint must carry, bitwise
    want = {k: _as_saved(v, got[k]) for k, v in expected.items() if k in got}
    if not any(k.startswith("param/") for k in want):  # names of another model: nothing compared
        named = sorted(expected)[:3]
        return [
            *problems,
            f"no trained value to compare: the expected state names no parameter of it, {named}",
        ]
    for key in [k for k in want if k.startswith("buffer/")]:
        kept = (_as_saved(c[key], got[key]) for c in copies if key in c)
        want[key] = next((s for s in kept if not compare_states({key: s}, {key: got[key]})), want[key])
    problems += [f"value: {d}" for d in compare_states(want, got)[:3]]
    return problems


def _as_saved(live: Any, loaded: torch.Tensor) -> Any:
    """What a checkpoint must hold for a live tensor: itself, or where a wrapper kept it in a lower
    floating precision for compute (FSDP1's MixedPrecision buffer_dtype) its exact upcast to the
    model's own dtype (bf16 -> fp32 is exact: a value rounded otherwise still differs)."""
    lower = (
        isinstance(live, torch.Tensor)
        and live.is_floating_point()
        and loaded.is_floating_point()
        and torch.finfo(live.dtype).bits < torch.finfo(loaded.dtype).bits
    )
    return live.to(loaded.dtype) if lower else live


@one_process  # as an inference user reads it: no process group
def inspect_phase(ctx: RankContext, spec: InspectSpec) -> dict[str, Any]:
    strategy = strategy_under_test(spec.strategy_factory, spec.case)
    path = Path(spec.directory)
    state = strategy.read_model_state(path)  # type: ignore[attr-defined]
    plain = build_model(spec.case.model, seed=0, rank=0, world_size=spec.case.world_size)
    # an export that is not the trained model itself (an adapter merged into its base) holds what
    # the strategy's export_of makes of the trained state, in one process
    export_of = getattr(strategy, "export_of", None)
    expected = export_of(spec.expected) if export_of is not None else spec.expected
    problems = hygiene_problems(state, plain, expected, spec.buffer_copies)
    export_problems = getattr(strategy, "export_problems", None)
    if export_problems is not None:  # the export's own form: its files' key set, its ties
        problems += export_problems(path)
    return {
        "problems": limit_lines(problems),
        "observed": [verdict("hygiene", p) for p in problems],
        "tensors": sum(isinstance(v, torch.Tensor) for v in state.values()),
    }


def execute(phases: Phases, case: Case, under: Under) -> tuple[Outcome, str]:
    factory = under.factory
    if not callable(getattr(factory(case), "read_model_state", None)):
        return (
            Outcome.UNSUPPORTED,
            "the strategy has no read_model_state(path): nothing reads its checkpoint offline",
        )
    directory = str(phases.scratch())
    try:
        written = saved(phases, case, directory, factory)
        inspected = phases.run(
            "read in one process",
            1,
            inspect_phase,
            InspectSpec(
                case, directory, written[0]["expected"], tuple(v.get("buffers", {}) for v in written), factory
            ),
        )
    except PhaseError as exc:
        return exc.outcome, exc.detail
    problems = [p for value in written for p in value["problems"]] + inspected[0]["problems"]
    phases.observed += observed_of(written, inspected)
    if problems:
        return Outcome.FAIL, f"{len(problems)} hygiene problems in the saved model state:\n" + "\n".join(
            problems
        )
    return Outcome.PASS, (
        f"consumable: {inspected[0]['tensors']} tensors, no wrapper prefix, the model's dtypes, loads into the "
        "plain model with strict=True, values bitwise the trained ones (read in one process; torch.load with "
        "weights_only=True, the default since torch 2.6)"
    )


# Every model: each rule (tied aliases, non-persistent buffers, BatchNorm buffers, frozen and
# idle layers) has a model on which it can fail.
HYGIENE_SLICE = Slice(
    "key hygiene",
    MAIN_WRAPPERS,
    precisions=lambda: (*mixed_precisions(), "fp32"),
    kinds=("full",),
    models=MODELS,
)
HYGIENE_CI_APIS = ("dsd_full", "sd_full", "sd_full_rank0")
HYGIENE_CI_SLICE = dataclasses.replace(HYGIENE_SLICE, apis=HYGIENE_CI_APIS, models=("mlp",))
HYGIENE_MODELS_SLICE = dataclasses.replace(
    HYGIENE_SLICE, apis=HYGIENE_CI_APIS, models=tuple(m for m in MODELS if m != "mlp"), precisions=("fp32",)
)

# The prefix problem: checkpoint_wrapper, torch.compile and 2-D meshes must not leak into the
# names of a full checkpoint (FSDP2 with CPU offload and pipeline stages ride along).
HYGIENE_LAYOUT_SLICE = Slice(
    "key hygiene of parallel layouts",
    LAYOUT_WRAPPERS,
    ("dsd_full",),
    storages=("hf_safetensors", "torch_save"),
    models=("llama",),
)
HYGIENE_LAYOUT_CI_SLICE = dataclasses.replace(HYGIENE_LAYOUT_SLICE, storages=("torch_save",))
HYGIENE_PP_FSDP_SLICE = dataclasses.replace(
    HYGIENE_LAYOUT_SLICE, name="key hygiene of pipeline stages with FSDP", wrappers=PP_FSDP_WRAPPERS
)

CHECK = Check(
    name="hygiene",
    title="Key hygiene: the full checkpoint loads strict=True into the plain model",
    shape=CaseCells(
        {
            "ci": ((HYGIENE_CI_SLICE, (2,)), (HYGIENE_MODELS_SLICE, (2,)), (HYGIENE_LAYOUT_CI_SLICE, (2,))),
            "default": (
                (HYGIENE_CI_SLICE, (2,)),
                (HYGIENE_MODELS_SLICE, (2,)),
                (HYGIENE_LAYOUT_SLICE, (2,)),
                (HYGIENE_PP_FSDP_SLICE, (4,)),
                (HYGIENE_FUSED_SLICE, (2,)),
            ),
            "full": (
                (HYGIENE_SLICE, (1, 2, 4)),
                (HYGIENE_LAYOUT_SLICE, (2, 4)),
                (HYGIENE_PP_FSDP_SLICE, (4,)),
                (HYGIENE_FUSED_SLICE, (2, 4)),
            ),
        },
    ),
    registered=True,
    execute=execute,
    features=(Feature("hygiene", "a full checkpoint loads strict into the plain model"),),
)

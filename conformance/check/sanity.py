"""Sanity of the thing under test: the wrapped model really is what the cell says.

Checked after training, before the checkpoint: a rank of a sharded wrapper holds fewer
parameter elements than the whole model (a strategy that silently replicates fails), a rank of
a replicated one holds all of them, and replicas (DDP ranks, NO_SHARD ranks, the same shard
position in every HSDP replica group) hold bitwise-equal parameters (replicas that stopped
syncing fail). Under tensor parallelism every weight the model's plan parallelizes is a
DTensor sharded over the mesh dimension "tp" on every rank (not a replica); in a pipeline
every rank holds its own stage's parameters, no two ranks the same one, all of them together
the whole model. An expert-parallel model's expert is spread only over ranks holding that
expert.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from conformance.case import Case
from conformance.check.compare import compare_tensors
from conformance.check.flat_tp import tp_specs
from conformance.check.snapshot import clean_name, local_tensor
from conformance.layout.registry import layout_of
from conformance.models import build_model, model_class, total_elements
from conformance.observed import Observed, verdict
from conformance.world import RankContext


def group_size(case: Case, world_size: int) -> int:
    """Over how many ranks one copy of the parameters is spread (the cell's layout says)."""
    return layout_of(case).group_size(case, world_size)


def parallel_params(case: Case) -> tuple[str, dict[str, str]]:
    """(mesh dimension, {parameter: what shards it}) a cell's layout must split: the weights
    of the model's tensor-parallel plan over "tp", its expert parameters over "ep"."""
    return layout_of(case).split_params(model_class(case.model))


def tp_problems(case: Case, ctx: RankContext, model: nn.Module) -> list[str]:
    """Every parameter the layout splits (parallel_params) is, on this rank, a DTensor with a
    Shard placement on the mesh dimension of that name ("tp", "ep"), or a piece FSDP1 flattened
    from one (conformance.check.flat_tp records its spec): a replicated one is neither tensor nor
    expert parallelism."""
    dim, expected = parallel_params(case)
    if not expected or ctx.world_size < 2:
        return []
    params = {clean_name(n): p for n, p in model.named_parameters()}
    flattened = tp_specs(model)  # FSDP1 over DTensors: the spec it recorded for each piece
    problems = []
    for name in sorted(expected):
        param = params.get(name)
        if name in flattened and type(param).__name__ != "DTensor":  # a flat parameter's view
            param = flattened[name]  # a DTensorSpec: device_mesh (as `mesh`), placements
        mesh = getattr(param, "device_mesh", None) or getattr(param, "mesh", None)
        names = list(getattr(mesh, "mesh_dim_names", None) or ())
        placements = list(getattr(param, "placements", ()))
        if dim not in names or not placements[names.index(dim)].is_shard():
            how = (
                "missing"
                if param is None
                else f"{type(param).__name__} placements {placements}, mesh dims {names}"
            )
            problems.append(
                f"rank {ctx.rank}: {name} is not a shard over mesh dim '{dim}' ({how}): "
                f"{expected[name]} (silently replicated?)"
            )
    return problems[:2]


def stage_problems(case: Case, ctx: RankContext, model: nn.Module) -> list[str]:
    """Each pipeline stage holds its own parameters only: no name on ranks of two stages, none
    empty, the union the whole model's names. A collective."""
    dp = layout_of(case).ranks_per_stage(case)  # rank = stage * dp + d
    if dp is None:  # not a pipeline
        return []
    mine = sorted(clean_name(n) for n, _ in model.named_parameters())
    names: list[list[str]] = [[] for _ in range(ctx.world_size)]
    dist.all_gather_object(names, mine)
    problems = []

    def others(r: int) -> bool:
        return r // dp != ctx.rank // dp

    shared = sorted(set(mine) & {n for r, held in enumerate(names) if others(r) for n in held})
    if shared:
        problems.append(
            f"rank {ctx.rank} holds {len(shared)} parameters another stage holds too, e.g. {shared[0]}"
        )
    if not mine:
        problems.append(f"rank {ctx.rank}'s stage holds no parameters")
    whole = {n for n, _ in build_model(case.model, 0).named_parameters()}
    missing = sorted(whole - {n for held in names for n in held})
    if missing and ctx.rank == 0:
        problems.append(f"no stage holds {len(missing)} of the model's parameters, e.g. {missing[0]}")
    return problems


def _expert_spreads(model: nn.Module) -> dict[str, list[int]]:
    """{expert module or parameter (clean name): the ranks one copy of it is spread over}: a
    DTensor parameter's mesh, or the process group of the innermost FSDP1 unit around an expert
    module (`experts.<k>`)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    spreads: dict[str, list[int]] = {}
    for name, param in model.named_parameters():
        mesh = getattr(param, "device_mesh", None)
        if clean_name(name).startswith("experts.") and mesh is not None:
            spreads[clean_name(name)] = sorted(mesh.mesh.flatten().tolist())
    units: dict[str, list[int]] = {}  # module path -> ranks of the innermost FSDP1 unit around it
    for path, module in model.named_modules():
        ranks = units.get(path.rsplit(".", 1)[0] if "." in path else "") if path else None
        if isinstance(module, FSDP):
            ranks = dist.get_process_group_ranks(module.process_group)
        if ranks is not None:
            units[path] = ranks
            clean = clean_name(path)
            if clean.startswith("experts.") and clean.count(".") == 1:
                spreads.setdefault(clean, ranks)
    return spreads


def expert_problems(case: Case, ctx: RankContext, model: nn.Module) -> list[str]:
    """An expert-parallel model (each rank holds one expert under a name every rank uses): each
    rank's expert is spread only over ranks that hold the same expert. A wrap that shards rank
    r's `experts.0` over the whole world makes one tensor of several experts, which trains and
    round-trips consistently and holds the right number of elements. A collective."""
    if not getattr(model_class(case.model), "expert_parallel", False) or ctx.world_size < 2:
        return []
    mine = next((m.expert_index for m in model.modules() if hasattr(m, "expert_index")), None)
    experts: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(experts, mine)
    for name, ranks in sorted(_expert_spreads(model).items()):
        held = sorted({experts[r] for r in ranks})
        if held != [mine]:
            return [
                f"rank {ctx.rank}: {name} (expert {mine}) is spread over ranks {ranks}, which hold "
                f"experts {held}: one tensor made of several experts (not expert-parallel aware?)"
            ]
    return []


def sharding_problems(case: Case, ctx: RankContext, model: nn.Module, strategy: Any = None) -> list[str]:
    """What is wrong with how the model is spread over the ranks (a collective). A plain
    module (no wrapper) trains alone on each rank: nothing to check. strategy: the strategy
    under test, which may say what a rank holds of a parameter (`held`) and over how many ranks
    one copy is spread (`shard_group_size`) for a layout its framework brings itself."""
    if not layout_of(case).sanity_checked:
        return []
    held = getattr(strategy, "held", None)
    pieces = [local_tensor(held(p) if held else p) for p in model.parameters()]
    local, total = sum(p.numel() for p in pieces), total_elements(case.model)
    spread = getattr(strategy, "shard_group_size", None)
    group = spread(ctx.world_size) if spread else group_size(case, ctx.world_size)
    gathered: list[list[torch.Tensor]] = [[] for _ in range(ctx.world_size)]
    dist.all_gather_object(gathered, pieces)
    counts = [sum(p.numel() for p in rank_pieces) for rank_pieces in gathered]
    problems = []
    # Sharded: not every rank may hold the whole model. (One rank may: FSDP2 puts a parameter
    # of first dimension 1 on rank 0 alone. A model of fewer elements than ranks cannot be
    # told from a replica by counts: FSDP1 pads each rank's shard to one element.)
    if group > 1 and total >= group and all(count >= total for count in counts):
        problems.append(
            f"every rank holds all {total} of the model's parameter elements (rank {ctx.rank}: {local}): "
            f"{case.sharding} over {group} ranks must spread them (silently replicated? the model is a "
            f"{type(model).__name__})"
        )
    if group == 1 and local < total:
        problems.append(
            f"rank {ctx.rank} holds {local} of {total} parameter elements: a replica must hold all"
        )
    peer = ctx.rank % group  # the first rank holding the same part of the parameters
    if peer != ctx.rank:
        for i, (mine, theirs) in enumerate(zip(gathered[ctx.rank], gathered[peer])):
            message = compare_tensors(theirs, mine)
            if message:
                problems.append(
                    f"rank {ctx.rank}'s parameter #{i} differs from replica rank {peer}'s: {message}"
                )
                break
    problems += tp_problems(case, ctx, model) + stage_problems(case, ctx, model)
    problems += expert_problems(case, ctx, model)
    return [f"sanity: {p}" for p in problems]


def sanity_records(problems: list[str], rank: int, scope: str = "") -> list[Observed]:
    """sharding_problems' lines as records of the cell (scope: "sanity" unless said)."""
    return [verdict("sanity", p.removeprefix("sanity: "), rank, scope=scope) for p in problems]

"""Sanity of the thing under test: the wrapped model really is what the cell says.

Checked after training, before the checkpoint: a rank of a sharded wrapper holds fewer
parameter elements than the whole model (a strategy that silently replicates fails), a rank of
a replicated one holds all of them, and replicas (DDP ranks, NO_SHARD ranks, the same shard
position in every HSDP replica group) hold bitwise-equal parameters (replicas that stopped
syncing fail).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from conformance.case import Case
from conformance.check.compare import compare_tensors
from conformance.check.snapshot import local_tensor
from conformance.models import total_elements
from conformance.observed import Observed, verdict
from conformance.strategy.wrappers import shard_group_size
from conformance.world import RankContext


def sharding_problems(case: Case, ctx: RankContext, model: nn.Module) -> list[str]:
    """What is wrong with how the model is spread over the ranks (a collective). A plain
    module (no wrapper) trains alone on each rank: nothing to check."""
    if case.family == "plain":
        return []
    pieces = [local_tensor(p) for p in model.parameters()]
    local, total = sum(p.numel() for p in pieces), total_elements(case.model)
    group = shard_group_size(case.sharding, ctx.world_size, case.hsdp_shape)
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
    return [f"sanity: {p}" for p in problems]


def sanity_records(problems: list[str], rank: int, scope: str = "") -> list[Observed]:
    """sharding_problems' lines as records of the cell (scope: "sanity" unless said)."""
    return [verdict("sanity", p.removeprefix("sanity: "), rank, scope=scope) for p in problems]

"""Experts as DTensors, as torchtitan lays out its MoE: one parameter per projection holding
every expert ([experts, in, out], torchtitan's GroupedExperts), sharded on dim 0 over an
expert-parallel mesh dimension named "ep"; the router and dense layers are data-parallel over
every rank.

Each rank runs its own tokens through its local experts, gated by the router: the all-to-all
dispatch of real expert parallelism moves activations, not checkpoint state, and is left out
(as for the process-group experts of conformance.models.ExpertParallelMoE).
"""

from __future__ import annotations

import torch
from torch import nn

BATCH = 4


class GroupedExperts(nn.Module):
    def __init__(self, experts: int, width: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(experts, width, hidden) * width**-0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, width) * hidden**-0.5)

    def local(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """This rank's experts (all of them when not sharded) and the index of the first."""
        w1, w2 = self.w1, self.w2
        mesh = getattr(w1, "device_mesh", None)
        if mesh is None:
            return w1, w2, 0
        names = list(mesh.mesh_dim_names or ())
        first = mesh.get_local_rank(names.index("ep")) if "ep" in names else 0
        local1, local2 = w1.to_local(), w2.to_local()  # type: ignore[attr-defined]
        return local1, local2, first * local1.shape[0]


class DTensorExpertsMoE(nn.Module):
    """Four experts of width 16 -> 24 -> 16 behind a router; 4 divides by 1, 2 and 4 ranks."""

    wrap_units: tuple[type[nn.Module], ...] = ()
    n_experts = 4

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(13, 16)
        self.router = nn.Linear(16, self.n_experts)
        self.experts = GroupedExperts(self.n_experts, 16, 24)
        self.head = nn.Linear(16, 5)

    @staticmethod
    def ep_params() -> tuple[str, ...]:
        """The parameters expert parallelism shards on mesh dimension "ep"."""
        return ("experts.w1", "experts.w2")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.inp(x))
        gates = torch.softmax(self.router(hidden), dim=-1)
        w1, w2, first = self.experts.local()
        mixed = torch.zeros_like(hidden)
        for k in range(w1.shape[0]):
            mixed = mixed + gates[:, first + k : first + k + 1] * (torch.relu(hidden @ w1[k]) @ w2[k])
        return self.head(hidden + mixed)

    @staticmethod
    def batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(BATCH, 13, generator=gen), torch.randn(BATCH, 5, generator=gen)

    @staticmethod
    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(out.float(), target.float())

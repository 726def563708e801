"""Tiny models, their optimizers, and deterministic training owned by the harness.

Batches are seeded from (cell seed, rank, step) so every run of a cell sees the same data,
whatever the strategy under test does with its RNG.
"""

from __future__ import annotations

import torch
from torch import nn

from conformance.world import RankContext

TRAIN_STEPS = 3
BATCH = 4


class UnevenMLP(nn.Module):
    """Output dimensions 24, 7 and 5: 7 and 5 do not divide by 2 or 4 ranks."""

    in_features = 13

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(self.in_features, 24)
        self.fc2 = nn.Linear(24, 7)
        self.fc3 = nn.Linear(7, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


MODELS: dict[str, type[nn.Module]] = {"mlp": UnevenMLP}


def build_model(name: str, seed: int) -> nn.Module:
    """The same weights on every rank for the same seed (FSDP needs identical inits)."""
    try:
        cls = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}") from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls()


def build_optimizer(name: str, model: nn.Module) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.01)
    raise ValueError(f"unknown optimizer {name!r}; known: ['adamw']")


def batch(
    seed: int, rank: int, step: int, in_features: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank * 1009 + step)
    x = torch.randn(BATCH, in_features, generator=gen)
    y = torch.randn(BATCH, 5, generator=gen)
    return x.to(device), y.to(device)


def train(
    model: nn.Module,
    optim: torch.optim.Optimizer,
    ctx: RankContext,
    model_name: str,
    steps: int = TRAIN_STEPS,
) -> list[float]:
    """A few AdamW steps on per-rank batches; returns the per-step losses."""
    in_features = MODELS[model_name].in_features  # type: ignore[attr-defined]
    losses = []
    for step in range(steps):
        x, y = batch(ctx.seed, ctx.rank, step, in_features, ctx.device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses

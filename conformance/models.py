"""The tiny fixed models every matrix trains, by axis name, and how a cell builds one.

Each class says how it is wrapped (wrap_units), what a batch is and its loss; a generated
model (conformance.generated, gen_...) answers the same. Weights are seeded, so every rank
of a cell builds the same model (an expert-parallel one: the same weights, its rank's expert).
"""

from __future__ import annotations

import torch
from torch import nn

from conformance.fused_lm import FusedLlama
from conformance.generated import MODEL_PREFIX, generated_model
from conformance.lm import ReshapedLlama, TinyLlama
from conformance.moe_dtensor import DTensorExpertsMoE

BATCH = 4


class UnevenMLP(nn.Module):
    """Output dimensions 24, 7 and 5: 7 and 5 do not divide by 2 or 4 ranks."""

    wrap_units: tuple[type[nn.Module], ...] = (nn.Linear,)

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(13, 24)
        self.fc2 = nn.Linear(24, 7)
        self.fc3 = nn.Linear(7, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))

    @staticmethod
    def batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(BATCH, 13, generator=gen), torch.randn(BATCH, 5, generator=gen)

    @staticmethod
    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(out.float(), target.float())

    @staticmethod
    def tp_plan() -> dict[str, object]:
        """Megatron's MLP pair: fc1 column-wise, fc2 row-wise (24 divides by 2 and 4 ranks);
        fc3 stays replicated."""
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        return {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}


class ScalarParameter(UnevenMLP):
    """The MLP with a learnable 0-dim parameter (a logit scale, as CLIP's), and nothing else
    beside its weight matrices: what a wrapper or a storage does to the scalar alone."""

    carries: frozenset[str] = frozenset({"scalar parameter"})

    def __init__(self) -> None:
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(1.25))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """What the constructor set of this module's own state (a model built on the meta device)."""
        self.logit_scale.fill_(1.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.logit_scale


class IntegerCounter(UnevenMLP):
    """The MLP with an integer buffer (a step counter, counted up by every forward), and nothing
    else beside its weight matrices: what a wrapper or a storage does to the int64 buffer alone."""

    carries: frozenset[str] = frozenset({"int buffer"})

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """What the constructor set of this module's own state (a model built on the meta device)."""
        self.steps.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        return super().forward(x)


class ScalarAndCounter(UnevenMLP):
    """The MLP with what real models carry beside weight matrices: a learnable 0-dim parameter
    (a logit scale) and an integer buffer (a step counter, counted up by every forward), together:
    a refusal of one of them hides what happens to the other, which ScalarParameter and
    IntegerCounter show alone."""

    carries: frozenset[str] = frozenset({"scalar parameter", "int buffer"})

    def __init__(self) -> None:
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(1.25))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """What the constructor set of this module's own state (a model built on the meta device)."""
        self.logit_scale.fill_(1.25)
        self.steps.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        return super().forward(x) * self.logit_scale


class TiedTransformer(nn.Module):
    """A one-layer transformer whose output head shares the input embedding's weight.

    The encoder layer is the wrap unit, so the tied pair stays together in the root's unit.
    """

    wrap_units: tuple[type[nn.Module], ...] = (nn.TransformerEncoderLayer,)
    carries: frozenset[str] = frozenset({"tied weights"})
    vocab, width, seq = 11, 12, 5

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(self.vocab, self.width)
        self.layer = nn.TransformerEncoderLayer(
            self.width, 2, dim_feedforward=20, dropout=0.0, batch_first=True
        )
        self.head = nn.Linear(self.width, self.vocab, bias=False)
        self.head.weight = self.embed.weight

    def tie_weights(self) -> None:
        """The tie made again, as Hugging Face's models make it (after to_empty, which unties)."""
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(tokens)))

    @classmethod
    def batch(cls, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, cls.vocab, (BATCH, cls.seq), generator=gen)
        return tokens, torch.randint(0, cls.vocab, (BATCH, cls.seq), generator=gen)

    @classmethod
    def loss(cls, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.float().reshape(-1, cls.vocab), target.reshape(-1))


class BatchNormFrozen(nn.Module):
    """BatchNorm running stats (buffers, per rank under FSDP) and a frozen first layer (no
    gradient, no optimizer state; its own wrap unit, as FSDP1 flat parameters need)."""

    wrap_units: tuple[type[nn.Module], ...] = (nn.Linear,)

    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.Linear(9, 16)
        self.frozen.requires_grad_(False)
        self.bn = nn.BatchNorm1d(16)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.frozen(x))))

    @staticmethod
    def batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(BATCH, 9, generator=gen), torch.randn(BATCH, 5, generator=gen)

    loss = UnevenMLP.loss


class ExpertParallelMoE(nn.Module):
    """A mixture-of-experts block laid out for expert parallelism, as fairscale's MoELayer and
    DeepSpeed lay it out: each rank holds its local expert under the same name on every rank
    (`experts.0`), and which expert it is depends on the rank.

    With E = `experts_in(world_size)` experts, rank r holds expert r % E, so expert k lives on
    the ranks {k, k + E, ...}: its expert-data-parallel group, on which the wrapper shards it
    (`expert_group`). The dense layers and the router are the same on every rank and sharded
    over the whole world. Each rank's tokens go through its own expert, gated by the router:
    the all-to-all dispatch of real expert parallelism moves activations, not checkpoint
    state, and is left out.
    """

    wrap_units: tuple[type[nn.Module], ...] = ()
    expert_parallel = True
    max_experts = 2

    def __init__(self, expert: int = 0) -> None:
        super().__init__()
        self.inp = nn.Linear(13, 16)
        self.router = nn.Linear(16, 1)
        self.head = nn.Linear(16, 5)
        with torch.random.fork_rng(devices=[]):  # expert k's weights depend on (seed, k) only
            torch.manual_seed(torch.initial_seed() * 31 + 7 + expert)
            ffn = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 16))
        self.experts = nn.ModuleDict({"0": ffn})  # the local expert's name is the same on every rank
        self.expert_index = expert

    @classmethod
    def experts_in(cls, world_size: int) -> int:
        return min(cls.max_experts, world_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.inp(x))
        (expert,) = self.experts.values()
        return self.head(hidden + torch.sigmoid(self.router(hidden)) * expert(hidden))

    batch = UnevenMLP.batch
    loss = UnevenMLP.loss


class ExpertParallelMoENamed(ExpertParallelMoE):
    """The same experts, each under a name of its own (`experts.<k>` on the ranks of expert k):
    the layout DCP's maintainers advise for expert parallelism (pytorch/pytorch#120356), since
    DCP takes tensors under one name on several ranks to be replicas of one tensor."""

    def __init__(self, expert: int = 0) -> None:
        super().__init__(expert)
        self.experts = nn.ModuleDict({str(expert): self.experts["0"]})


class FrozenAndIdle(nn.Module):
    """What a resume must carry beyond the stepped parameters: a frozen layer that is still in
    the optimizer (as `optimizer(model.parameters())` puts it there: no gradient, so no state),
    and a trainable layer that never gets a gradient (an unused branch: in the optimizer, never
    stepped, no state). After a load both must still be in their param group, without state."""

    wrap_units: tuple[type[nn.Module], ...] = (nn.Linear,)
    optimize_frozen = True

    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.Linear(13, 24)
        self.frozen.requires_grad_(False)
        self.fc = nn.Linear(24, 5)
        self.idle = nn.Linear(5, 3)  # trainable, never called

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.frozen(x)))

    batch = UnevenMLP.batch
    loss = UnevenMLP.loss


class NonPersistentBuffer(UnevenMLP):
    """The MLP with a non-persistent buffer (as rotary caches and attention masks are): used in
    the forward, rebuilt by the constructor, never part of a state dict. A checkpoint that holds
    it is not the model's own state dict (the hygiene check says so)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 13), persistent=False)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The buffer computed as the constructor computes it, as a rotary cache's inv_freq is: no
        state dict holds it, so a model built on the meta device has it only from here."""
        self.scale.copy_(torch.linspace(0.5, 1.5, 13))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in the input's dtype: under FSDP1 mixed precision only the root's inputs are cast, and
        # an fp32 buffer would turn them back into fp32 before the bf16 inner units
        return super().forward(x * self.scale.to(x.dtype))


class ReshapedMLP(UnevenMLP):
    """The MLP's parameter names with other shapes (fc2 has 8 outputs, not 7): a checkpoint of
    a different model, for the corrupt check. Not an axis of the matrix."""

    def __init__(self) -> None:
        super().__init__()
        self.fc2 = nn.Linear(24, 8)
        self.fc3 = nn.Linear(8, 5)


MODELS: dict[str, type[nn.Module]] = {
    "mlp": UnevenMLP,
    "tied_transformer": TiedTransformer,
    "bn_frozen": BatchNormFrozen,
    "moe": ExpertParallelMoE,
    "moe_named": ExpertParallelMoENamed,
    "frozen_idle": FrozenAndIdle,
    "mlp_nonpersistent": NonPersistentBuffer,
    "mlp_reshaped": ReshapedMLP,
    "mlp_scalar": ScalarAndCounter,
    "mlp_scalar_param": ScalarParameter,
    "mlp_int_buffer": IntegerCounter,
    "llama": TinyLlama,
    "llama_reshaped": ReshapedLlama,
    "llama_fused": FusedLlama,
    "moe_dtensor": DTensorExpertsMoE,
}


# A model -> its twin with the same parameter names and other shapes: what the corrupt
# check's other_model variant loads a checkpoint into.
RESHAPED: dict[str, str] = {"mlp": "mlp_reshaped", "llama": "llama_reshaped"}


def model_class(name: str) -> type[nn.Module]:
    """A fixed model's class, or a generated one's (conformance.generated: gen_...)."""
    if name.startswith(MODEL_PREFIX):
        return generated_model(name)
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)} and gen_...") from None


def build_model(name: str, seed: int, rank: int = 0, world_size: int = 1) -> nn.Module:
    """The same weights on every rank for the same seed (FSDP needs identical inits); an
    expert-parallel model holds the expert of its rank."""
    cls = model_class(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if getattr(cls, "expert_parallel", False):
            return cls(expert=rank % cls.experts_in(world_size))  # type: ignore[attr-defined,call-arg]
        return cls()


def total_elements(name: str) -> int:
    """Parameter elements of the unwrapped model: what a replica holds (with one expert, for
    an expert-parallel model: what one rank would hold unsharded)."""
    return sum(p.numel() for p in build_model(name, 0).parameters())


def has_idle_parameters(model: nn.Module) -> bool:
    """Whether the model keeps parameters that get no gradient in its optimizer
    (FrozenAndIdle): build_optimizer includes them, and DDP must be told."""
    return any(getattr(m, "optimize_frozen", False) for m in model.modules())


def carries(name: str) -> frozenset[str]:
    """The features a model carries beside weight matrices ("scalar parameter", "int buffer"):
    what the feature table's columns ask, by the model's own declaration."""
    return getattr(model_class(name), "carries", frozenset())

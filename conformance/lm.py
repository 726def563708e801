"""A tiny llama-style language model, laid out as torchtitan lays out its llama: token
embeddings, blocks of attention (wq, wk, wv, wo) and a SwiGLU feed-forward (w1, w2, w3), each
behind an RMSNorm, a final norm and an output head. Its tensor-parallel plan is torchtitan's
(sequence parallelism on the norms, attention and feed-forward inputs column-wise, outputs
row-wise, embeddings and head sharded over the vocabulary) and its pipeline split is
torchtitan's manual one: a stage keeps the full model's names and drops the modules of other
stages (set to None, which the forward skips).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

BATCH = 4


class Attention(nn.Module):
    def __init__(self, width: int, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.wq = nn.Linear(width, width, bias=False)
        self.wk = nn.Linear(width, width, bias=False)
        self.wv = nn.Linear(width, width, bias=False)
        self.wo = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds a slice of the heads
        q, k, v = (
            m(x).view(batch, seq, -1, self.head_dim).transpose(1, 2) for m in (self.wq, self.wk, self.wv)
        )
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(width, hidden, bias=False)
        self.w2 = nn.Linear(hidden, width, bias=False)
        self.w3 = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, width: int, head_dim: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(width)
        self.attention = Attention(width, head_dim)
        self.ffn_norm = nn.RMSNorm(width)
        self.feed_forward = FeedForward(width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class TinyLlama(nn.Module):
    """Two blocks of width 16 (4 heads of 4), vocabulary 16, sequence 8: every parallelized
    dimension (vocabulary, heads, hidden, the sequence of sequence parallelism) divides by 1,
    2 and 4 ranks."""

    wrap_units: tuple[type[nn.Module], ...] = (TransformerBlock,)
    vocab, width, seq, n_layers, hidden = 16, 16, 8, 2, 24

    def __init__(self) -> None:
        super().__init__()
        self.tok_embeddings: nn.Module | None = nn.Embedding(self.vocab, self.width)
        self.layers = nn.ModuleDict(
            {str(i): TransformerBlock(self.width, 4, self.hidden) for i in range(self.n_layers)}
        )
        self.norm: nn.Module | None = nn.RMSNorm(self.width)
        self.output: nn.Module | None = nn.Linear(self.width, self.vocab, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.tok_embeddings is not None:  # the first pipeline stage
            h = self.tok_embeddings(h)
        for layer in self.layers.values():
            h = layer(h)
        if self.output is not None:  # the last pipeline stage
            assert self.norm is not None
            h = self.output(self.norm(h))
        return h

    @classmethod
    def tp_plan(cls) -> dict[str, Any]:
        """torchtitan's llama plan (torchtitan/models/llama3/infra/parallelize.py,
        apply_tp), module name -> parallel style: the embeddings row-wise into a
        sequence-sharded activation, every norm SequenceParallel, attention and feed-forward
        inputs gathered (PrepareModuleInput) into column-wise q, k, v, w1, w3, their outputs
        row-wise back into sequence shards, the head column-wise with a replicated output (no
        loss parallelism)."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            PrepareModuleInput,
            RowwiseParallel,
            SequenceParallel,
        )

        plan: dict[str, Any] = {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
        }
        for i in range(cls.n_layers):
            block = f"layers.{i}"
            plan[f"{block}.attention_norm"] = SequenceParallel()
            plan[f"{block}.attention"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
            for name in ("attention.wq", "attention.wk", "attention.wv"):
                plan[f"{block}.{name}"] = ColwiseParallel()
            plan[f"{block}.attention.wo"] = RowwiseParallel(output_layouts=Shard(1))
            plan[f"{block}.ffn_norm"] = SequenceParallel()
            plan[f"{block}.feed_forward"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
            plan[f"{block}.feed_forward.w1"] = ColwiseParallel()
            plan[f"{block}.feed_forward.w2"] = RowwiseParallel(output_layouts=Shard(1))
            plan[f"{block}.feed_forward.w3"] = ColwiseParallel()
        return plan

    @classmethod
    def max_stages(cls) -> int:
        return cls.n_layers

    def keep_stage(self, stage: int, stages: int) -> None:
        """Drop every module of the other pipeline stages (torchtitan's manual split): stage s
        keeps its contiguous share of the blocks, the first the embeddings, the last the norm
        and the head; names stay the full model's."""
        if not 1 <= stages <= self.max_stages():
            raise ValueError(f"{stages} pipeline stages: the model has {self.max_stages()} blocks")
        per = self.n_layers // stages
        blocks = tuple(1 + i for i in range(stage * per, (stage + 1) * per))  # unit i + 1 is block i
        first, last = (0,) if stage == 0 else (), (self.n_layers + 1,) if stage == stages - 1 else ()
        self.keep_units(first + blocks + last)

    @classmethod
    def pipeline_units(cls) -> int:
        """The pieces an interleaved schedule stages one by one: the embeddings, each block, and
        the norm with the head."""
        return cls.n_layers + 2

    def keep_units(self, units: tuple[int, ...]) -> None:
        """Drop every module of the other units (pipeline_units); names stay the full model's."""
        blocks = {str(u - 1) for u in units if 1 <= u <= self.n_layers}
        for name in [n for n in self.layers if n not in blocks]:
            del self.layers[name]
        if 0 not in units:
            self.tok_embeddings = None
        if self.n_layers + 1 not in units:
            self.norm = None
            self.output = None

    def unit_view(self, unit: int) -> TinyLlama:
        """One unit of this model as a module of its own that shares this model's modules (so its
        parameters are this model's): the module of an interleaved schedule's stage."""
        view = type(self).__new__(type(self))
        nn.Module.__init__(view)
        last = unit == self.n_layers + 1
        view.tok_embeddings = self.tok_embeddings if unit == 0 else None
        view.layers = nn.ModuleDict(
            {str(unit - 1): self.layers[str(unit - 1)]} if 0 < unit <= self.n_layers else {}
        )
        view.norm = self.norm if last else None
        view.output = self.output if last else None
        return view

    @classmethod
    def batch(cls, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, cls.vocab, (BATCH, cls.seq), generator=gen)
        return tokens, torch.randint(0, cls.vocab, (BATCH, cls.seq), generator=gen)

    @classmethod
    def loss(cls, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.float().reshape(-1, cls.vocab), target.reshape(-1))


class ReshapedLlama(TinyLlama):
    """TinyLlama's names with other shapes (a feed-forward hidden size of 32, not 24): a
    checkpoint of a different model, for the corrupt check. Not an axis of the matrix."""

    hidden = 32

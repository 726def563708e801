"""The tiny llama with fused projections whose checkpoint layout is not the live one.

Each attention holds one `wqkv` Linear and each feed-forward one `w13` Linear, but the state
dict shows the llama's split keys (`wq`, `wk`, `wv`; `w1`, `w3`): a state-dict post-hook splits
the fused weight on save and a load pre-hook fuses the split keys back before the default load,
the public hooks torchtitan's FusedQKVLinear and FusedSwiGLU register
(`register_state_dict_post_hook`, `register_load_state_dict_pre_hook`; torchtitan PRs #3638 and
#3656). A DTensor is made whole (Replicate) on its mesh before it is split or fused and stays a
DTensor, as theirs does, so that the default load copies it into the sharded parameter.

The fused rows are grouped so that a column-wise shard of any degree dividing the heads (or the
hidden size) holds whole groups: `wqkv` is torchtitan's layout `[heads, 3, head_dim, width]`
(each head's q, k and v rows together; no grouped-query heads here) and `w13` interleaves gate
and up rows, `[hidden, 2, width]`, as gpt-oss's `gate_up_proj` does. So the llama's
tensor-parallel plan holds with `wqkv` and `w13` column-wise, and a checkpoint of this model
has exactly the llama's keys and shapes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from conformance.lm import TinyLlama

# (fused parameter, its split keys in the order of the fused rows' groups)
QKV = ("wqkv", ("wq", "wk", "wv"))
GATE_UP = ("w13", ("w1", "w3"))


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A DTensor replicated on its mesh (a DTensor still), any other tensor as it is."""
    from torch.distributed.tensor import DTensor, Replicate

    if isinstance(t, DTensor):
        return t.redistribute(t.device_mesh, [Replicate()] * t.device_mesh.ndim)
    return t


def split_on_save(module: nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """State-dict post-hook: the fused weight `[groups, parts, rows, width]` into one key per part."""
    fused, parts = module.fused  # type: ignore[attr-defined]
    key = f"{prefix}{fused}.weight"
    if key not in state_dict:
        return
    whole = _whole(state_dict.pop(key))
    grouped = whole.reshape(module.groups, len(parts), -1, whole.shape[-1])  # type: ignore[attr-defined]
    for i, part in enumerate(parts):
        state_dict[f"{prefix}{part}.weight"] = grouped[:, i].reshape(-1, whole.shape[-1]).contiguous()


def fuse_on_load(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Load pre-hook: the split keys fused back into the fused weight, before the default load."""
    fused, parts = module.fused  # type: ignore[attr-defined]
    keys = [f"{prefix}{part}.weight" for part in parts]
    if not all(k in state_dict for k in keys):
        return  # a checkpoint of the fused layout itself, or keys missing: the default load says so
    pieces = [_whole(state_dict.pop(k)) for k in keys]
    width = pieces[0].shape[-1]
    grouped = [p.reshape(module.groups, 1, -1, width) for p in pieces]  # type: ignore[attr-defined]
    state_dict[f"{prefix}{fused}.weight"] = torch.cat(grouped, dim=1).reshape(-1, width)


class FusedProjection(nn.Module):
    """What a module with a fused weight registers: the split on save, the fusion on load."""

    fused: tuple[str, tuple[str, ...]]
    groups: int

    def register_split_layout(self) -> None:
        self.register_state_dict_post_hook(split_on_save)
        self.register_load_state_dict_pre_hook(fuse_on_load)


class FusedAttention(FusedProjection):
    fused = QKV

    def __init__(self, width: int, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.groups = width // head_dim
        self.wqkv = nn.Linear(width, 3 * width, bias=False)
        self.wo = nn.Linear(width, width, bias=False)
        self.register_split_layout()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds whole heads' q, k and v rows
        qkv = self.wqkv(x).view(batch, seq, -1, 3, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(3))
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FusedFeedForward(FusedProjection):
    fused = GATE_UP

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.groups = hidden
        self.w13 = nn.Linear(width, 2 * hidden, bias=False)
        self.w2 = nn.Linear(hidden, width, bias=False)
        self.register_split_layout()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).unflatten(-1, (-1, 2)).unbind(-1)
        return self.w2(nn.functional.silu(gate) * up)


class FusedLlama(TinyLlama):
    """TinyLlama whose attention and feed-forward hold fused `wqkv` and `w13`, checkpointed as
    the llama's split keys (see the module doc)."""

    carries: frozenset[str] = frozenset({"fused projection"})

    def __init__(self) -> None:
        super().__init__()
        for block in self.layers.values():
            block.attention = FusedAttention(self.width, 4)
            block.feed_forward = FusedFeedForward(self.width, self.hidden)

    @classmethod
    def tp_plan(cls) -> dict[str, Any]:
        """The llama's plan with the fused weights column-wise in place of q, k, v and w1, w3:
        each rank's rows are whole heads and whole gate/up pairs (see the module doc)."""
        from torch.distributed.tensor.parallel import ColwiseParallel

        plan = {
            name: style
            for name, style in super().tp_plan().items()
            if not name.endswith((".wq", ".wk", ".wv", ".w1", ".w3"))
        }
        for i in range(cls.n_layers):
            plan[f"layers.{i}.attention.wqkv"] = ColwiseParallel()
            plan[f"layers.{i}.feed_forward.w13"] = ColwiseParallel()
        return plan

"""Module wrappers that change parameter names, composed with FSDP2 as torchtitan composes
them (activation checkpointing, then torch.compile, then fully_shard, each per wrap unit):
`checkpoint_wrapper` puts `_checkpoint_wrapped_module.` and torch.compile `_orig_mod.` into
every name below the unit. A checkpoint must hold the plain model's names (the prefix problem
behind Lightning's `_forward_module.`); the hygiene check loads it into the plain model.

torch.compile runs with the aot_eager backend: it needs no C compiler and traces the same
OptimizedModule (the `_orig_mod.` prefix comes from the module wrapper, not the backend);
inductor on the CPU would compile C++ for every cell, minutes per world here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from conformance.strategy.wrappers import fully_shard_fn
from conformance.world import RankContext


def wrap_units(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> list[nn.Module]:
    """Replace every wrap unit below the root by wrap(unit), in its parent under its name;
    returns the wrapped units."""
    units = tuple(getattr(model, "wrap_units", (nn.Linear,)))
    out = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, units):
                setattr(parent, name, wrap(child))
                out.append(getattr(parent, name))
    return out


def checkpointed(module: nn.Module) -> nn.Module:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    return checkpoint_wrapper(module)


def compiled(module: nn.Module) -> nn.Module:
    import torch

    return torch.compile(module, backend="aot_eager")  # type: ignore[return-value]


@dataclass(frozen=True)
class PrefixingFsdp2Wrapper:
    """FSDP2 on a 1-D mesh over the wrap units, each wrapped first by checkpoint_wrapper or
    torch.compile (`wrap_with`), then the root, as torchtitan orders them."""

    wrap_with: str  # checkpoint | compile

    def wrap(self, model: nn.Module, ctx: RankContext) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh

        return self.shard_on(model.to(ctx.device), init_device_mesh(ctx.device.type, (ctx.world_size,)), ctx)

    def shard_on(self, model: nn.Module, mesh: object, ctx: RankContext) -> nn.Module:
        """The same on a data-parallel mesh given (a framework's parallelize function gets its
        mesh from the framework: Lightning's ModelParallelStrategy)."""
        if self.wrap_with == "compile":
            import torch

            torch._dynamo.reset()  # no earlier cell's compiled code or recompile count carries over
        wrap = {"checkpoint": checkpointed, "compile": compiled}[self.wrap_with]
        fully_shard = fully_shard_fn()
        for unit in wrap_units(model, wrap):
            fully_shard(unit, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

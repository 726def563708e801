"""What a precision axis value is: how the harness trains a cell in it. A value may configure a
sharded wrapper's own mixed-precision setting (FSDP1's MixedPrecision, FSDP2's
MixedPrecisionPolicy: the parameters stay fp32, the wrapper casts them for compute and
communication), run the forward under `torch.autocast`, scale the loss with a GradScaler (whose
state is then part of the checkpoint), or cast the model itself to a low precision (its parameters,
floating buffers and so its optimizer state)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from conformance.axis import available

# keyword arguments of a wrapper's mixed-precision setting, as (name, dtype) pairs
Dtypes = tuple[tuple[str, torch.dtype], ...]
# keyword arguments of a GradScaler (init_scale, growth_interval, ...)
ScalerArgs = tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Precision:
    """name: the axis value, a word of every cell id (left out of it for the default, fp32).
    fsdp1: the keyword arguments of FSDP1's MixedPrecision (None: no mixed precision).
    fsdp2: those of FSDP2's MixedPrecisionPolicy (None: none). autocast: the dtype the forward
    and the loss run in under `torch.autocast` (None: no autocast). loss_scale: the keyword
    arguments of the GradScaler that scales the loss (None: none); its state_dict() is saved and
    loaded with the checkpoint, under "scaler". params: the dtype the model's floating parameters
    and buffers are cast to before it is wrapped (None: fp32 kept), and the batches with them.
    grads: the dtype the autograd engine gives the parameters' gradients (`Tensor.grad_dtype`, set
    on every floating parameter before the model is wrapped; None: the parameter's own); an
    optimizer then builds the state it derives from the gradient in that dtype. unavailable: why
    this torch lacks what it needs (None: it has it). description: what it casts.
    A wrapper without a mixed-precision setting (DDP) refuses a value that has one."""

    name: str
    fsdp1: Dtypes | None = None
    fsdp2: Dtypes | None = None
    autocast: torch.dtype | None = None
    loss_scale: ScalerArgs | None = None
    params: torch.dtype | None = None
    grads: torch.dtype | None = None
    description: str = ""
    unavailable: Callable[[], str | None] = field(default=available, compare=False)

    @property
    def mixed(self) -> bool:
        """Whether a wrapper casts anything for it (a wrapper with no such setting refuses it)."""
        return self.fsdp1 is not None or self.fsdp2 is not None

    @property
    def computes_in(self) -> torch.dtype:
        """The dtype the forward computes in: the model's own (`params`), autocast's, or the one a
        wrapper casts the parameters to (its mixed-precision setting's param_dtype), else fp32."""
        wrapper = dict(self.fsdp2 or self.fsdp1 or ()).get("param_dtype")
        return self.params or self.autocast or wrapper or torch.float32

    @property
    def keeps_fp32(self) -> bool:
        """Whether the model's own parameters, and so a checkpoint's weights, stay fp32."""
        return self.params is None

    def prepare(self, model: nn.Module) -> nn.Module:
        """The model this precision trains: cast to `params`, its gradients' dtype set to `grads`
        (before the strategy wraps it)."""
        model = model if self.params is None else model.to(self.params)
        if self.grads is not None:
            for param in model.parameters():
                if param.is_floating_point():
                    param.grad_dtype = self.grads
        return model

    def not_in_effect(self, model: nn.Module) -> str | None:
        """After a backward: why the gradients are not what this precision promises (a wrapper
        that dropped `grad_dtype`), or None. A cell trained so would test nothing of it."""
        if self.grads is None:
            return None
        wrong = next(
            (
                (n, p.grad.dtype)
                for n, p in model.named_parameters()
                if p.grad is not None and p.grad.dtype != self.grads
            ),
            None,
        )
        if wrong is None:
            return None
        name, dtype = wrong
        return f"precision {self.name}: {name}'s gradient is {dtype}, not {self.grads} (grad_dtype not in effect)"

    @contextlib.contextmanager
    def watching_compute(self, model: nn.Module, first: bool) -> Iterator[set[torch.dtype]]:
        """On a run's first step of a precision a wrapper casts for (`mixed`): the dtypes the
        model's Linear layers compute in (their outputs), for `compute_not_in_effect`."""
        seen: set[torch.dtype] = set()
        if not first or not self.mixed:
            yield seen
            return

        def record(module: nn.Module, args: object, out: object) -> None:
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                seen.add(out.dtype)

        hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, nn.Linear)]
        try:
            yield seen
        finally:
            for hook in hooks:
                hook.remove()

    def compute_not_in_effect(self, seen: set[torch.dtype]) -> str | None:
        """Why a forward whose Linear layers computed in `seen` did not run this precision (a
        wrapper that ignored its mixed-precision setting trains in fp32), or None."""
        if not self.mixed or not seen or self.computes_in in seen:
            return None
        got = ", ".join(sorted(str(d).removeprefix("torch.") for d in seen))
        return (
            f"precision {self.name}: the forward's Linear layers computed in {got}, not "
            f"{str(self.computes_in).removeprefix('torch.')} (the wrapper's mixed-precision setting not in effect)"
        )

    def batch(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A batch for the prepared model: floating tensors cast to `params` (token ids kept)."""
        if self.params is None:
            return tensors
        return tuple(t.to(self.params) if t.is_floating_point() else t for t in tensors)

    @contextlib.contextmanager
    def forward(self, device: torch.device) -> Iterator[None]:
        """Where the forward and the loss run: under torch.autocast of `autocast` (as the AMP
        recipe does), else as they are."""
        if self.autocast is None:
            yield
            return
        with torch.autocast(device.type, dtype=self.autocast):
            yield

    def scaler(self, device: torch.device, replicated: bool) -> Any:
        """The GradScaler of a cell (None: no loss scaling). replicated: every rank holds whole
        gradients (DDP, one rank), for which torch.amp.GradScaler is the documented one; sharded
        gradients take ShardedGradScaler, which agrees on inf/NaN across the ranks (its
        documentation: "supports Pytorch DDP and FSDP implementations")."""
        if self.loss_scale is None:
            return None
        kwargs: dict[str, Any] = dict(self.loss_scale)
        if replicated or not torch.distributed.is_initialized():
            return torch.amp.GradScaler(device.type, **kwargs)
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device.type, **kwargs)

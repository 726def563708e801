"""The live state of a DeepSpeed engine by the model's parameters: the StateView
(conformance.strategy.protocol) through which the harness reads what ZeRO keeps in flat
partitions keyed by no parameter (conformance/adapters/deepspeed.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


def _whole(param: nn.Parameter, partition: torch.Tensor) -> torch.Tensor:
    """ZeRO 1-2: the parameter's whole value of a flat partition's tensor (the fp32 master or
    an optimizer state entry), as DeepSpeed's own get_full_hp_param assembles it: this rank's
    fragment at the parameter's `_hp_mapping` addresses, summed over the data-parallel group."""
    import torch.distributed as dist

    whole = torch.zeros(param.numel(), dtype=partition.dtype, device=partition.device)
    mapping = param._hp_mapping  # type: ignore[attr-defined]
    if mapping is not None:
        lp, hp = mapping.lp_fragment_address, mapping.hp_fragment_address
        whole.narrow(0, lp.start, lp.numel).copy_(partition.narrow(0, hp.start, hp.numel))
    dist.all_reduce(whole, group=param._dp_group)  # type: ignore[attr-defined]
    return whole.reshape(param.shape)


@dataclass
class ZeroView:
    """The live state by the model's parameters (conformance.strategy.protocol.StateView).
    groups: the model's parameters of each param group of the cell's optimizer, taken before
    DeepSpeed flattened them; its torch optimizer then holds one flat partition per group.

    ZeRO-3: DeepSpeed's documented accessors (safe_get_full_optimizer_state,
    safe_get_full_fp32_param; GatheredParameters for the parameters). ZeRO 1-2: the same
    fragments those accessors read, through each parameter's `_hp_mapping` addresses: the
    accessors link a parameter to its optimizer state lazily, once, after the first step of the
    first param group, so they raise for every parameter of another group and for every
    parameter after load_checkpoint until a step (docs/libraries.md)."""

    engine: Any
    model: nn.Module
    groups: list[list[nn.Parameter]]

    @property
    def _base(self) -> torch.optim.Optimizer:
        return self.engine.optimizer.optimizer  # the cell's torch optimizer, over ZeRO's flat partitions

    def _stage3(self) -> bool:
        return self.engine.zero_optimization_stage() == 3

    def parameters_by_name(self) -> Mapping[str, torch.Tensor]:
        import deepspeed

        params = list(self.model.named_parameters())
        if not self._stage3():
            return {name: p.detach().clone() for name, p in params}
        with deepspeed.zero.GatheredParameters([p for _, p in params]):
            return {name: p.detach().clone() for name, p in params}

    def _entries(self, param: nn.Parameter, flat: torch.Tensor, keys: list[str]) -> dict[str, Any]:
        if self._stage3():
            from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

            out = {k: safe_get_full_optimizer_state(param, k) for k in keys}
            return {**out, "fp32_master": safe_get_full_fp32_param(param)}
        state = self._base.state[flat]
        return {**{k: _whole(param, state[k]) for k in keys}, "fp32_master": _whole(param, flat)}

    def _flats(self, group: int) -> list[torch.Tensor]:
        """The flat fp32 partitions of a param group on this rank, where each stage keeps them:
        ZeRO 1-2 one per group (`single_partition_of_fp32_groups`, also the torch optimizer's
        "params"); ZeRO-3 one per sub-group (`fp32_partitioned_groups_flat`; it empties the
        torch optimizer's "params" between steps)."""
        zero = self.engine.optimizer
        if not self._stage3():
            return [zero.single_partition_of_fp32_groups[group]]
        return [
            flat
            for sub, flat in enumerate(zero.fp32_partitioned_groups_flat)
            if zero.sub_group_to_group_id[sub] == group
        ]

    @property
    def state(self) -> Mapping[Any, Mapping[str, Any]]:
        out: dict[Any, dict[str, Any]] = {}
        base = self._base
        for i, params in enumerate(self.groups):
            flats = self._flats(i)
            entries = base.state.get(flats[0], {}) if flats else {}
            keys = sorted(k for k, v in entries.items() if torch.is_tensor(v) and v.dim() > 0)
            scalars = {k: v for k, v in entries.items() if k not in keys}  # Adam's step: one per partition
            for param in params if entries else ():
                if self._managed(param):
                    out[param] = {**self._entries(param, flats[0], keys), **scalars}
        return out

    def _managed(self, param: nn.Parameter) -> bool:
        """Whether ZeRO keeps the parameter in its partitions: it leaves out a parameter that does
        not require a gradient (a frozen layer the cell's optimizer lists), which then has neither
        an fp32 master nor optimizer state, as a torch optimizer keeps none for it. ZeRO 1-2 mark
        what they manage with `_hp_mapping` (None where this rank holds none of it); ZeRO-3 with
        its `ds_tensor` partition, and its accessors answer for every parameter."""
        return self._stage3() or hasattr(param, "_hp_mapping")

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [
            {**{k: v for k, v in group.items() if k != "params"}, "params": params}
            for params, group in zip(self.groups, self._base.param_groups, strict=True)
        ]


# the dynamic loss scaler's state a restart must carry on from: the scale, the step count its
# growth window counts from, the last overflow's step and the hysteresis left
SCALER_STATE = ("cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis")


@dataclass
class LossScalerView:
    """DeepSpeed's fp16 loss scaler (its ZeRO optimizer's `loss_scaler`, which save_checkpoint
    pickles into the optimizer states and load_checkpoint puts back), read as a GradScaler's
    state_dict() is: the harness compares it under "scaler/" as it compares a GradScaler's."""

    engine: Any

    def state_dict(self) -> dict[str, Any]:
        scaler = self.engine.optimizer.loss_scaler
        return {key: getattr(scaler, key) for key in SCALER_STATE}

"""FSDP1 (FullyShardedDataParallel) state_dict() of a module whose state-dict hooks checkpoint a
fused weight under split keys (torchtitan's FusedSwiGLU pattern: register_state_dict_post_hook
splits w13 into w1/w3, register_load_state_dict_pre_hook fuses them back).

The plain module round-trips it exactly. Under FSDP1's FULL_STATE_DICT (and SHARDED) the FSDP
unit's own post-hook looks up every original parameter's name in the state dict the submodules
produced, after the submodule's hook renamed it, and raises AssertionError ("FSDP assumes ... is
in the state_dict"). Exit 1 while it raises or the keys or values differ from the plain module's,
0 when FSDP1 returns the split keys with the full values. torch only, one process (gloo world of 1).
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn


class FusedGateUp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w13 = nn.Linear(4, 6, bias=False)
        self.register_state_dict_post_hook(self._split)
        self.register_load_state_dict_pre_hook(self._fuse)

    @staticmethod
    def _split(module, state_dict, prefix, local_metadata) -> None:
        w = state_dict.pop(prefix + "w13.weight")
        state_dict[prefix + "w1.weight"], state_dict[prefix + "w3.weight"] = w.chunk(2)

    @staticmethod
    def _fuse(module, state_dict, prefix, *args) -> None:
        keys = (prefix + "w1.weight", prefix + "w3.weight")
        if all(k in state_dict for k in keys):
            state_dict[prefix + "w13.weight"] = torch.cat([state_dict.pop(k) for k in keys])


def main() -> int:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType

    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(FusedGateUp(), nn.Linear(6, 2))
        plain = {k: v.clone() for k, v in model.state_dict().items()}
        print("plain module keys:", sorted(plain))
        wrapped = FSDP(model, use_orig_params=True, device_id=torch.device("cpu"))
        with FSDP.state_dict_type(wrapped, StateDictType.FULL_STATE_DICT):
            try:
                sd = wrapped.state_dict()
            except AssertionError as exc:
                print(f"FSDP1 FULL_STATE_DICT state_dict() raised AssertionError: {str(exc)[:160]}")
                return 1
        print("FSDP1 keys:", sorted(sd))
        same = sd.keys() == plain.keys() and all(torch.equal(sd[k], plain[k]) for k in plain)
        return 0 if same else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

"""get_model_state_dict / set_model_state_dict on a module whose state-dict hooks checkpoint a
fused weight under split keys (torchtitan's FusedSwiGLU / FusedQKVLinear pattern:
register_state_dict_post_hook splits, register_load_state_dict_pre_hook fuses back).

module.state_dict() / load_state_dict() round-trip it exactly; DSD's get_model_state_dict
resolves every key of module.state_dict() to a module attribute (_get_fqns) and raises
AttributeError on the split key. Exit 1 while DSD refuses or loads anything but the same bits,
0 when the split keys come back and load bitwise. torch only, one process, no process group.
"""

import sys

import torch
from torch import nn


class FusedGateUp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w13 = nn.Linear(4, 6, bias=False)  # rows: gate (3), up (3)
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
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    torch.manual_seed(0)
    saved = nn.Sequential(FusedGateUp())
    plain = saved.state_dict()
    print("module.state_dict() keys:", sorted(plain))
    fresh = nn.Sequential(FusedGateUp())
    fresh.load_state_dict(plain)
    assert torch.equal(fresh[0].w13.weight, saved[0].w13.weight), "the hooks themselves do not round-trip"
    try:
        sd = get_model_state_dict(saved)
    except Exception as exc:  # noqa: BLE001
        print(f"get_model_state_dict raised {type(exc).__name__}: {exc}")
        return 1
    print("get_model_state_dict keys:", sorted(sd))
    other = nn.Sequential(FusedGateUp())
    try:
        set_model_state_dict(other, {k: v.clone() for k, v in sd.items()})
    except Exception as exc:  # noqa: BLE001
        print(f"set_model_state_dict raised {type(exc).__name__}: {exc}")
        return 1
    same = torch.equal(other[0].w13.weight, saved[0].w13.weight)
    print("loaded bitwise:", same)
    return 0 if same and sorted(sd) == sorted(plain) else 1


if __name__ == "__main__":
    sys.exit(main())

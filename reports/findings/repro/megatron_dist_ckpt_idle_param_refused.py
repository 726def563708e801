"""Megatron-core's dist_checkpointing refuses to load an optimizer whose saved state lacks a
parameter that never got a gradient (an "idle" parameter: requires_grad, in the optimizer, unused
in the forward, so torch's Adam keeps no state for it).

Save, as FP32Optimizer.sharded_state_dict(is_loading=False) does and Megatron's
tests/unit_tests/dist_checkpointing/test_optimizer.py call it:
  ShardedTensor.from_rank_offsets(name, param, replica_id=0) for each model tensor,
  get_param_id_to_sharded_param_map(model_sharded, params),
  optim_state_to_sharding_state(optim.state_dict(), id_map, exclude_keys="step"),
  dist_checkpointing.save(sd, dir, get_default_save_sharded_strategy("torch_dist")).
Load, as FP32Optimizer.sharded_state_dict(is_loading=True) does: Megatron's Adam init_state_fn
first (megatron/core/optimizer/__init__.py: zero exp_avg / exp_avg_sq for every parameter with no
state; a closure, copied here), the same template, then dist_checkpointing.load(template, dir).
The save wrote no exp_avg for the idle parameter; the template asks for one, and the load raises
KeyError "optimizer.state.exp_avg.idle.weight from model not in state dict" (strategies/torch.py
_validate_global_shapes) under load's default strict=StrictHandling.ASSUME_OK_UNEXPECTED
(strict="log_unexpected" loads it, the idle parameter without state as saved). Megatron's own
DDP hands every parameter a main_grad, so its training steps them all; a torch optimizer outside
it (torch DDP, no wrapper) keeps no state for an unused parameter.
One process, world size 1, gloo, CPU; torch and megatron-core only.
Where CUDA is absent, the only change: torch.cuda.synchronize is a no-op and
torch.cuda.current_device() returns "cpu" (Megatron's torch_dist save calls both).
Exit 1 + "BUG PRESENT" while the load raises that KeyError (inside DCP's CheckpointException),
0 when it loads the saved state, 3 on any other failure.
"""

import os
import shutil
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

warnings.filterwarnings("ignore")
if not torch.cuda.is_available():  # the CPU shim: nothing else changed
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"

from megatron.core import dist_checkpointing  # noqa: E402
from megatron.core.dist_checkpointing import ShardedTensor  # noqa: E402
from megatron.core.dist_checkpointing.optimizer import (  # noqa: E402
    get_param_id_to_sharded_param_map,
    optim_state_to_sharding_state,
)
from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.idle = nn.Linear(4, 3)  # trainable, never called: no gradient, no Adam state

    def forward(self, x):
        return self.fc(x)


def init_state_fn(opt):  # Megatron's Adam init_state_fn (use_precision_aware_optimizer=False)
    for group in opt.param_groups:
        for p in group["params"]:
            if len(opt.state[p]) == 0:
                opt.state[p]["exp_avg"] = torch.zeros_like(p.data)
                opt.state[p]["exp_avg_sq"] = torch.zeros_like(p.data)


def sharded(model, opt):
    model_sd = {k: ShardedTensor.from_rank_offsets(k, v, replica_id=0) for k, v in model.state_dict(keep_vars=True).items()}
    optim_sd = opt.state_dict()
    params = [p for g in opt.param_groups for p in g["params"]]
    optim_state_to_sharding_state(optim_sd, get_param_id_to_sharded_param_map(model_sd, params), exclude_keys="step")
    return {"model": model_sd, "optimizer": optim_sd}


def main() -> int:
    import megatron.core

    print(f"torch {torch.__version__}, megatron-core {megatron.core.__version__}")
    tmp = tempfile.mkdtemp()
    store = dist.FileStore(os.path.join(tmp, "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        model(torch.randn(5, 6)).sum().backward()
        opt.step()
        print("parameters with Adam state:", [n for n, p in model.named_parameters() if opt.state[p]])
        ckpt = os.path.join(tmp, "ckpt")
        os.makedirs(ckpt)
        dist_checkpointing.save(sharded(model, opt), ckpt, get_default_save_sharded_strategy("torch_dist"))

        fresh = Net()
        fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1e-2)
        init_state_fn(fresh_opt)
        try:
            loaded = dist_checkpointing.load(sharded(fresh, fresh_opt), ckpt)
        except (CheckpointException, KeyError) as exc:  # DCP's CheckpointException (a BaseException) carries it
            if "KeyError" not in str(exc) or "from model not in state dict" not in str(exc):
                print(f"another failure, not this bug: {type(exc).__name__}: {exc}")
                return 3
            print("dist_checkpointing.load raised:", str(exc).strip().splitlines()[-1][:170])
            print("BUG PRESENT: the optimizer's own saved state does not load (idle parameter)")
            return 1
        print("loaded optimizer keys:", sorted(loaded["optimizer"]["state"]))
        print("BUG ABSENT: the checkpoint loaded")
        return 0
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

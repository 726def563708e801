"""NeMo Automodel's optimizer save adds zero Adam state to the live optimizer.

Behaviour: Checkpointer.save_optimizer (nemo_automodel 0.7.0) takes the optimizer's state through its
OptimizerState wrapper, whose state_dict() first calls _materialize_missing_adam_state: every Adam or
AdamW parameter without state yet (one that never got a gradient: an idle branch, a frozen layer
left in the optimizer) gets step=0 and zero exp_avg / exp_avg_sq, in the live optimizer. The save
changes the state it saves, and the checkpoint (and every optimizer loaded from it) holds state the
trained optimizer did not have. Zero state with step 0 gives the same first update as no state, so
training goes on the same; the key set of the optimizer's state is what differs. It is NeMo's
deliberate workaround (NVIDIA-NeMo/Automodel#2779) for torch's load refusing a checkpoint without an
idle parameter's state (the suite's finding idle-param-missing-optimizer-state).

Seen on: torch 2.13.0+cpu, nemo-automodel 0.7.0 (gloo, CPU, 1 rank).
Upstream: https://github.com/NVIDIA-NeMo/Automodel/pull/2779 (the workaround).

Run: python reports/findings/repro/nemo_automodel_save_materializes_idle_adam_state.py
Exit 1 + "BUG PRESENT:" if the save adds state to the live optimizer, 0 + "FIXED:" if not, 2 on any
setup failure.
"""

import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
from torch import nn


class WithIdle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.idle = nn.Linear(3, 2)  # trainable, never called: no gradient, no Adam state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def main() -> int:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29563")
    try:
        from nemo_automodel.components.checkpoint.config import CheckpointingConfig

        dist.init_process_group("gloo", rank=0, world_size=1)
    except Exception:
        traceback.print_exc()
        return 2
    try:
        torch.manual_seed(0)
        model = WithIdle()
        optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model(torch.randn(5, 4)).sum().backward()
        optim.step()
        before = sum(1 for p in model.parameters() if optim.state.get(p))
        with tempfile.TemporaryDirectory() as tmp:
            checkpointer = CheckpointingConfig(
                checkpoint_dir=tmp, model_save_format="safetensors", save_consolidated=False
            ).build(dp_rank=0, tp_rank=0, pp_rank=0, moe_mesh=None, process_group=None)
            checkpointer.save_optimizer(optim, model, tmp, None)
            if hasattr(checkpointer, "close"):
                checkpointer.close()
        after = sum(1 for p in model.parameters() if optim.state.get(p))
        idle = [optim.state.get(p) for p in model.idle.parameters()]
        print(f"parameters with Adam state: {before} before the save, {after} after it")
        if after != before:
            steps = [float(s["step"]) for s in idle if s]
            print(f"BUG PRESENT: the save gave the idle layer's {len(steps)} parameters state (step {steps})")
            return 1
        print("FIXED: the save left the live optimizer's state as it was")
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

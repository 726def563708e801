"""deepspeed.initialize raises on a model with a 0-dim parameter (finding
deepspeed-zero-scalar-parameter).

torch and deepspeed only (DS_BUILD_SHM_COMM=1 pip install --no-cache-dir --no-build-isolation
deepspeed==0.19.8; on a machine without a GPU DS_ACCELERATOR=cpu, set here). One process, a
gloo group of one rank. A model of a Linear and a learnable scalar, nn.Parameter(torch.tensor(
1.25)) (as CLIP's logit_scale), goes through deepspeed.initialize with a torch Adam under ZeRO
stage 1, 2 and 3 (STAGES=1 for one; STAGES=0, no ZeRO, fails alike), then trains one step.

The engine's _broadcast_model (runtime/engine.py, called from _configure_distributed_model
before any ZeRO optimizer is built) broadcasts every parameter as bytes,
dist.broadcast(p.data.view(torch.uint8), ...); torch refuses to view a 0-dim float tensor as a
dtype of another element size: RuntimeError: self.dim() cannot be 0 to view Float as Byte
(different element sizes). The DeepSpeed master of 2026-08-22 (edaa722, 0.19.6) broadcast
p.data itself.

Expected output while the bug is present, per stage: "ZeRO stage N: initialize raised
RuntimeError: self.dim() cannot be 0 to view Float as Byte (different element sizes)".
Exit 1 while initialize (or the step) raises at some stage, 0 once every stage trains, 2 if the
script itself cannot run here. Seen on torch 2.13.0 and 2.15.0 with deepspeed 0.19.8 (CPU, gloo).
"""

import os
import socket
import sys
import traceback

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch
from torch import nn

STAGES = [int(s) for s in os.environ.get("STAGES", "1,2,3").split(",")]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 2)
        self.logit_scale = nn.Parameter(torch.tensor(1.25))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.logit_scale


def try_stage(stage: int) -> str | None:
    """None if initialize and one step work, else the error."""
    import deepspeed

    torch.manual_seed(0)
    model = Net()
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31,
    }
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    try:
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    except RuntimeError as exc:
        return f"initialize raised RuntimeError: {exc}"
    try:
        loss = engine(torch.randn(4, 8, generator=torch.Generator().manual_seed(0))).square().mean()
        engine.backward(loss)
        engine.step()
    except RuntimeError as exc:
        return f"the training step raised RuntimeError: {exc}"
    return None


def main() -> int:
    import deepspeed

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    )
    deepspeed.init_distributed(dist_backend="gloo")
    print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}, a 0-dim nn.Parameter")
    failed = []
    for stage in STAGES:
        error = try_stage(stage)
        print(f"ZeRO stage {stage}: {error or 'initialize and one step worked'}")
        if error is not None:
            failed.append(stage)
    if failed:
        print(f"BUG PRESENT: a model with a 0-dim parameter cannot be used at ZeRO stage(s) {failed}")
        return 1
    print("FIXED: a model with a 0-dim parameter initializes and trains at every stage")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
        code = 2
    sys.stdout.flush()
    os._exit(code)  # no teardown crash can change the verdict

"""torchtitan's CheckpointManager cannot load its own checkpoint when a trainable parameter never
got a gradient (finding torchtitan-idle-param-missing-optimizer-state).

torch and torchtitan only (pip install --no-deps torchtitan==0.3.0 spmd_types==0.2.3; pip install tyro).
One process, a gloo group of one rank, as torchtitan's trainer sets it up. A model with a
trainable parameter that takes no part in the forward (an unused head, an expert never routed
to) trains two steps with torchtitan's OptimizersContainer (AdamW) and LRSchedulersContainer;
CheckpointManager.save(2); then, as after a restart, fresh objects and CheckpointManager.load().

OptimizersContainer.state_dict() flattens the state the optimizer has: none for the idle
parameter. The fresh container's load_state_dict first runs init_optim_state, a zero-gradient
step that creates state for every trainable parameter, so DCP's load plan asks for
"optimizer.state.idle.weight.step", which the checkpoint lacks: the load raises.

Exit 1 while the bug is present (the load raises "Missing key in checkpoint state_dict"), 0 once
the checkpoint loads and every parameter and optimizer state tensor is back bitwise, 2 if the
script itself cannot run here.
"""

import os
import socket
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
from torch import nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.idle = nn.Linear(4, 4)  # trainable, never in the forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def build(seed: int):
    from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig

    torch.manual_seed(seed)
    model = Model()
    group = ParamGroupConfig(pattern=r".*", optimizer_name="AdamW", optimizer_kwargs={"lr": 1e-2})
    optimizers = OptimizersContainer.Config(param_groups=[group], implementation="for-loop").build(
        model_parts=[model]
    )
    schedulers = LRSchedulersContainer.Config(warmup_steps=1).build(optimizers=optimizers, training_steps=4)
    return model, optimizers, schedulers


def manager(directory: str, model, optimizers, schedulers):
    from torchtitan.components.checkpointer import CheckpointManager

    config = CheckpointManager.Config(enable=True, folder="checkpoint", interval=1)
    return config.build(
        dataloader=None,
        model_parts=[model],
        optimizers=optimizers,
        lr_schedulers=schedulers,
        states={},
        sd_adapter=None,
        base_folder=directory,
    )


def snapshot(model, optimizers) -> dict[str, torch.Tensor]:
    out = {f"param/{n}": p.detach().clone() for n, p in model.named_parameters()}
    names = {id(p): n for n, p in model.named_parameters()}
    for optim in optimizers:
        for param, entries in optim.state.items():
            for key, value in entries.items():
                out[f"optim/{names[id(param)]}/{key}"] = value.detach().clone()
    return out


def main() -> int:
    import torchtitan  # noqa: F401

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        with tempfile.TemporaryDirectory() as directory:
            model, optimizers, schedulers = build(seed=0)
            for step in range(2):
                x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
                model(x).square().mean().backward()
                optimizers.step()
                schedulers.step()
                optimizers.zero_grad()
            saved = snapshot(model, optimizers)
            print(
                f"torch {torch.__version__}; trained 2 steps; optimizer state for: "
                f"{sorted({k.split('/')[1] for k in saved if k.startswith('optim/')})}"
            )
            checkpointer = manager(directory, model, optimizers, schedulers)
            checkpointer.save(2)
            checkpointer.close()

            fresh_model, fresh_optimizers, fresh_schedulers = build(seed=1)
            restarted = manager(directory, fresh_model, fresh_optimizers, fresh_schedulers)
            try:
                restarted.load(step=-1)
            except BaseException as exc:  # DCP's CheckpointException is a BaseException
                lines = [
                    ln.strip() for ln in str(exc).splitlines() if ln.startswith("RuntimeError: Missing key")
                ]
                if lines:
                    print(f"BUG PRESENT: CheckpointManager.load() of its own checkpoint raised: {lines[0]}")
                    return 1
                raise
            finally:
                restarted.close()
            loaded = snapshot(fresh_model, fresh_optimizers)
            differ = sorted(k for k in saved if k not in loaded or not torch.equal(saved[k], loaded[k]))
            if differ:
                print(f"BUG PRESENT (another way): the load returned, but these differ: {differ}")
                return 1
            print("FIXED: the checkpoint loads, every parameter and optimizer state tensor bitwise back")
            return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:  # DCP's CheckpointException is a BaseException
        traceback.print_exc()
        code = 2
    sys.stdout.flush()
    os._exit(code)  # no teardown crash can change the verdict

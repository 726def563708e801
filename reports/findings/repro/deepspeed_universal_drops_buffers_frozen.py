"""DeepSpeed's universal checkpoint restores neither module buffers nor frozen parameters
(finding deepspeed-universal-drops-buffers-frozen).

torch and deepspeed only (deepspeed==0.19.8, prebuilt shm op; DS_ACCELERATOR=cpu set here), one
process, a gloo group of one rank. A model (frozen Linear, BatchNorm1d, trainable Linear, int64
buffer) trains 3 Adam steps at ZeRO stage 1, 2, 3 (STAGES=1 for one), save_checkpoint(tag,
client_state={UNIVERSAL_CHECKPOINT_INFO: {}}), ds_to_universal's main converts it, and a fresh
engine (other seed) with "checkpoint": {"load_universal": true} loads <tag>_universal, as
DeepSpeed's tutorial and its own test do; control: a fresh engine, plain load_checkpoint(<tag>).
_load_checkpoint (engine.py) calls load_module_state_dict only when not load_universal; the
universal load fills only the ZeRO optimizer's trainable parameters.

Expected output while the bug is present, for each stage: "ZeRO stage 1 universal: NOT restored:
bn.num_batches_tracked, bn.running_mean, bn.running_var, frozen.bias, frozen.weight, seen" and
"ZeRO stage 1 plain: all restored". Exit 1 while a universal load leaves a parameter or buffer
different (bitwise) from the saved one, 0 once all come back, 2 if the script cannot run here.
Seen on torch 2.13.0 and 2.15.0, deepspeed 0.19.8, CPU.
"""

import os
import socket
import sys
import tempfile
import traceback
from types import SimpleNamespace

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch
from torch import nn

STAGES = [int(s) for s in os.environ.get("STAGES", "1,2,3").split(",")]
TAG = "step3"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.Linear(8, 8).requires_grad_(False)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 2)
        self.register_buffer("seen", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen += x.shape[0]
        return self.head(self.bn(self.frozen(x)))


def engine(stage: int, seed: int, universal: bool):
    import deepspeed

    torch.manual_seed(seed)
    model = Net()
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31,
    } | ({"checkpoint": {"load_universal": True}} if universal else {})
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
    return deepspeed.initialize(model=model, optimizer=optimizer, config=config)[0]


def state(ds_engine) -> dict[str, torch.Tensor]:
    import deepspeed

    module = ds_engine.module
    with deepspeed.zero.GatheredParameters(list(module.parameters())):
        params = {n: p.detach().clone() for n, p in module.named_parameters()}
    return params | {n: b.clone() for n, b in module.named_buffers()}


def changed(saved: dict, loaded: dict) -> str:
    bad = sorted(n for n, t in saved.items() if not (t.dtype == loaded[n].dtype and t.equal(loaded[n])))
    return f"NOT restored: {', '.join(bad)}" if bad else "all restored"


def run_stage(stage: int) -> bool:
    from deepspeed.checkpoint import UNIVERSAL_CHECKPOINT_INFO
    from deepspeed.checkpoint.ds_to_universal import main as convert_to_universal

    trained = engine(stage, seed=0, universal=False)
    for step in range(3):
        loss = trained(torch.randn(4, 8, generator=torch.Generator().manual_seed(step))).square().mean()
        trained.backward(loss)
        trained.step()
    saved = state(trained)
    flags = {"num_extract_workers": 1, "num_merge_workers": 1, "keep_temp_folder": False, "strict": True}
    verdicts = {}
    with tempfile.TemporaryDirectory() as root:
        trained.save_checkpoint(root, tag=TAG, client_state={UNIVERSAL_CHECKPOINT_INFO: {}})
        src, dst = os.path.join(root, TAG), os.path.join(root, f"{TAG}_universal")
        convert_to_universal(
            SimpleNamespace(input_folder=src, output_folder=dst, inject_missing_state=False, **flags)
        )
        for name, universal, tag in (("universal", True, f"{TAG}_universal"), ("plain", False, TAG)):
            fresh = engine(stage, seed=1, universal=universal)
            fresh.load_checkpoint(root, tag=tag)
            verdicts[name] = changed(saved, state(fresh))
            print(f"ZeRO stage {stage} {name}: {verdicts[name]}")
    return verdicts["universal"] != "all restored"


def main() -> int:
    import deepspeed

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    )
    deepspeed.init_distributed(dist_backend="gloo")
    print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}")
    buggy = [stage for stage in STAGES if run_stage(stage)]
    if buggy:
        print(f"BUG PRESENT: universal load left buffers / frozen parameters at ZeRO stage(s) {buggy}")
        return 1
    print("FIXED: the universal load restored every parameter and buffer")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
        code = 2
    sys.stdout.flush()
    os._exit(code)  # no teardown crash can change the verdict

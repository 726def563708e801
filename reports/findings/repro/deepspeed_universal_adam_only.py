"""DeepSpeed's ds_to_universal cannot convert a checkpoint whose optimizer is not Adam-like
(finding deepspeed-universal-adam-only).

torch and deepspeed only (DS_BUILD_SHM_COMM=1 pip install --no-cache-dir --no-build-isolation
deepspeed==0.19.8; on a machine without a GPU DS_ACCELERATOR=cpu, set here). One process, a
gloo group of one rank. A model trains two steps under ZeRO (stage 1; STAGE=2 or 3 alike) with a
torch SGD with momentum, a client optimizer DeepSpeed takes ("zero_allow_untested_optimizer"),
saves with save_checkpoint(tag=..., client_state={UNIVERSAL_CHECKPOINT_INFO: {}}), and
ds_to_universal's main converts the tag into a universal checkpoint, as DeepSpeed's tutorial and
its own test do. extract_zero_shards reads each group's "exp_avg" and "exp_avg_sq"
unconditionally; SGD's state is "momentum_buffer": the conversion raises KeyError: 'exp_avg'.

Exit 1 while the conversion raises that KeyError, 0 once it converts the checkpoint, 2 if the
script itself cannot run here.
"""

import os
import socket
import sys
import tempfile
import traceback
from types import SimpleNamespace

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402
from torch import nn  # noqa: E402

STAGE = int(os.environ.get("STAGE", "1"))
TAG = "step2"


def main() -> int:
    import deepspeed
    from deepspeed.checkpoint import UNIVERSAL_CHECKPOINT_INFO
    from deepspeed.checkpoint.ds_to_universal import main as convert_to_universal

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "zero_optimization": {"stage": STAGE, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31,
    }
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    for step in range(2):
        loss = engine(torch.randn(4, 8, generator=torch.Generator().manual_seed(step))).square().mean()
        engine.backward(loss)
        engine.step()
    print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}, ZeRO stage {STAGE}, SGD(momentum=0.9)")
    with tempfile.TemporaryDirectory() as directory:
        engine.save_checkpoint(directory, tag=TAG, client_state={UNIVERSAL_CHECKPOINT_INFO: {}})
        args = SimpleNamespace(
            input_folder=os.path.join(directory, TAG),
            output_folder=os.path.join(directory, f"{TAG}_universal"),
            num_extract_workers=1,
            num_merge_workers=1,
            keep_temp_folder=False,
            strict=True,
            inject_missing_state=False,
        )
        try:
            convert_to_universal(args)
        except KeyError as exc:
            if exc.args == ("exp_avg",):
                print("BUG PRESENT: ds_to_universal raised KeyError: 'exp_avg' on an SGD checkpoint")
                return 1
            raise
    print("FIXED: ds_to_universal converted a checkpoint of SGD with momentum")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
        code = 2
    sys.stdout.flush()
    os._exit(code)  # no teardown crash can change the verdict

"""DeepSpeed's universal checkpoint, loaded under ZeRO-3, gives every param group the first
group's hyperparameters (finding deepspeed-universal-zero3-param-groups).

torch and deepspeed only (DS_BUILD_SHM_COMM=1 pip install --no-cache-dir --no-build-isolation
deepspeed==0.19.8; on a machine without a GPU DS_ACCELERATOR=cpu, set here). One process, a
gloo group of one rank. A model trains two steps under ZeRO-3 with a torch AdamW of two param
groups (lr 0.01 / weight_decay 0.01 and lr 0.02 / weight_decay 0.0), as DeepSpeed's tutorial
and its own test of universal checkpoints do it: save_checkpoint(tag=..., client_state=
{UNIVERSAL_CHECKPOINT_INFO: {}}), ds_to_universal's main converts the tag into <tag>_universal,
and a fresh engine configured with "checkpoint": {"load_universal": true} loads it.

stage3.py's load_hp_checkpoint_state_from_checkpoint_dir_stage3 sets every param group's
hyperparameters from the saved param_groups[0] ("Generally, the hyperparameters of each
parameter should be the same"). The same script at ZeRO stage 1 or 2 (STAGE=1) restores both
groups.

Exit 1 while the bug is present (a loaded group's lr or weight_decay is not the saved one), 0
once every group's hyperparameters come back, 2 if the script itself cannot run here.
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

STAGE = int(os.environ.get("STAGE", "3"))
TAG = "step2"


def engine(seed: int, universal: bool):
    import deepspeed

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    groups = [
        {"params": list(model[0].parameters()), "lr": 0.01, "weight_decay": 0.01},
        {"params": list(model[1].parameters()), "lr": 0.02, "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "zero_optimization": {"stage": STAGE, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31,
    }
    if universal:
        config["checkpoint"] = {"load_universal": True}
    ds_engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return ds_engine


def hyperparameters(ds_engine) -> list[dict[str, float]]:
    groups = ds_engine.optimizer.optimizer.param_groups
    return [{"lr": g["lr"], "weight_decay": g["weight_decay"]} for g in groups]


def main() -> int:
    import deepspeed
    from deepspeed.checkpoint import UNIVERSAL_CHECKPOINT_INFO
    from deepspeed.checkpoint.ds_to_universal import main as convert_to_universal

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    deepspeed.init_distributed(dist_backend="gloo")
    with tempfile.TemporaryDirectory() as directory:
        trained = engine(seed=0, universal=True)
        for step in range(2):
            gen = torch.Generator().manual_seed(step)
            loss = trained(torch.randn(4, 8, generator=gen)).square().mean()
            trained.backward(loss)
            trained.step()
        saved = hyperparameters(trained)
        trained.save_checkpoint(directory, tag=TAG, client_state={UNIVERSAL_CHECKPOINT_INFO: {}})
        convert_to_universal(
            SimpleNamespace(
                input_folder=os.path.join(directory, TAG),
                output_folder=os.path.join(directory, f"{TAG}_universal"),
                num_extract_workers=1,
                num_merge_workers=1,
                keep_temp_folder=False,
                strict=True,
                inject_missing_state=False,
            )
        )
        fresh = engine(seed=1, universal=True)
        fresh.load_checkpoint(directory, tag=f"{TAG}_universal")
        loaded = hyperparameters(fresh)
    print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}, ZeRO stage {STAGE}")
    print(f"saved param groups:  {saved}")
    print(f"loaded param groups: {loaded}")
    if loaded != saved:
        print("BUG PRESENT: the universal checkpoint's load changed a param group's hyperparameters")
        return 1
    print("FIXED: every param group's hyperparameters came back")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
        code = 2
    sys.stdout.flush()
    os._exit(code)  # no teardown crash can change the verdict

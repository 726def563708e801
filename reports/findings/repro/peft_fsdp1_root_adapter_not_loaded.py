"""PEFT's set_peft_model_state_dict into an FSDP1 root loads none of the adapter's weights, silently.

Bug: a LoRA adapter saved with PeftModel.save_pretrained(dir, state_dict=<full state dict>) from an
FSDP1 model (use_orig_params=True) is loaded back with load_peft_weights(dir) and
set_peft_model_state_dict(fsdp_root, weights) under FSDP.state_dict_type(FULL_STATE_DICT), as
Accelerate's adapter-only FSDP1 load calls it (accelerate/utils/fsdp_utils.py
_set_model_state_dict, which the transformers Trainer's resume reaches). PEFT decides whether the
adapter's keys keep their `base_model.model.` prefix by looking for parameters named so
(peft/utils/save_and_load.py, `requires_prefix`); the FSDP1 root's parameters are named
`_fsdp_wrapped_module.base_model.model.*`, so the prefix is stripped, load_state_dict(strict=False)
returns every key as unexpected, and the adapter keeps its fresh weights (lora_B stays zeros). No
error, no warning. The control (the root's own load_state_dict with the same keys) loads them.

Correct behaviour: the LoRA weights equal the saved ones after the load.

Seen on: torch 2.13.0+cpu, peft 0.21.2 (the check came with huggingface/peft#3212, v0.20.0).
Upstream: not found (issues and closed PRs of peft and accelerate searched; likely new).
Run: python reports/findings/repro/peft_fsdp1_root_adapter_not_loaded.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import json
import os
import socket
import sys
import tempfile
import time
import traceback
import warnings

import torch.multiprocessing as mp

WORLD = 2
TIMEOUT_S = 120


def build(seed, nonzero_b):
    import torch
    from peft import LoraConfig, get_peft_model
    from torch import nn
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(seed)
    base = nn.Sequential(nn.Linear(13, 16), nn.ReLU(), nn.Linear(16, 13))
    peft_model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["0", "2"]))
    if nonzero_b:  # as after training: lora_B starts at zeros
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn_like(param))
    root = FSDP(
        peft_model,
        use_orig_params=True,
        auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
        device_id=torch.device("cpu"),
    )
    return root, peft_model


def lora_weights(root):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(root, options=StateDictOptions(full_state_dict=True))
    return {k: v.detach().clone() for k, v in full.items() if "lora_" in k}


def differing(expected, got):
    import torch

    return sorted(k for k in expected if k not in got or not torch.equal(expected[k], got[k]))


def worker(rank, tmp, port):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    warnings.filterwarnings("ignore")
    res = {}
    try:
        import torch.distributed as dist
        from peft.utils import load_peft_weights, set_peft_model_state_dict
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import StateDictType

        dist.init_process_group("gloo")
        saved_root, saved_model = build(seed=0, nonzero_b=True)
        expected = lora_weights(saved_root)
        full = get_model_state_dict(saved_root, options=StateDictOptions(full_state_dict=True))
        adapter_dir = os.path.join(tmp, "adapter")
        if rank == 0:
            saved_model.save_pretrained(adapter_dir, state_dict=full)
        dist.barrier()
        weights = load_peft_weights(adapter_dir)

        root, _ = build(seed=1, nonzero_b=False)  # the fresh model a resume loads into
        with FSDP.state_dict_type(root, StateDictType.FULL_STATE_DICT):
            loaded = set_peft_model_state_dict(root, weights)
        res["unexpected"] = sorted(loaded.unexpected_keys)
        res["differ"] = differing(expected, lora_weights(root))

        control, _ = build(seed=1, nonzero_b=False)
        with FSDP.state_dict_type(control, StateDictType.FULL_STATE_DICT):
            control.load_state_dict(expected, strict=False)
        res["control_differ"] = differing(expected, lora_weights(control))
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)


def main():
    import peft
    import torch

    print(f"torch {torch.__version__}, peft {peft.__version__}, {WORLD} gloo ranks")
    tmp = tempfile.mkdtemp()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.start_processes(worker, args=(tmp, port), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"setup failure: the ranks did not finish within {TIMEOUT_S} s")
            return 2
    results = []
    for rank in range(WORLD):
        with open(os.path.join(tmp, f"rank{rank}.json")) as f:
            results.append(json.load(f))
    for rank, res in enumerate(results):
        if "setup_error" in res:
            print(f"setup failure on rank {rank}:\n{res['setup_error']}")
            return 2
        if res["control_differ"]:
            print(f"setup failure: the control load left {res['control_differ']} different on rank {rank}")
            return 2
    if any(res["differ"] for res in results):
        for rank, res in enumerate(results):
            print(f"rank {rank}: unexpected keys {res['unexpected']}; LoRA weights not loaded: {res['differ']}")
        print("BUG PRESENT: set_peft_model_state_dict(fsdp1_root, weights) loaded no adapter weight")
        return 1
    print("FIXED: the adapter's weights equal the saved ones after set_peft_model_state_dict(fsdp1_root, ...)")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except Exception:
        traceback.print_exc()
        code = 2
    sys.stdout.flush()
    sys.exit(code)

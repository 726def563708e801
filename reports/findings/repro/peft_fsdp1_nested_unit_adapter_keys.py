"""PEFT's save_pretrained(dir, state_dict=<full state dict>) of an FSDP1 model with nested units
leaves the LoRA weights of the layers inside those units out of adapter_model.safetensors, silently.

Calls, as an FSDP user saves an adapter (PEFT's accelerate/fsdp.md, the transformers Trainer with
FULL_STATE_DICT): peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=[every
Linear])); root = FullyShardedDataParallel(peft_model, use_orig_params=True,
auto_wrap_policy=ModuleWrapPolicy({Block})); full = get_model_state_dict(root,
options=StateDictOptions(full_state_dict=True)); rank 0: root.module.save_pretrained(dir,
state_dict=full). PEFT picks the adapter's keys by module names (tuners_utils.py
_get_tuner_state_dict_key_prefixes, from huggingface/peft#3490, peft 0.21.0) and strips only a
leading `_fsdp_wrapped_module.`; a LoRA layer inside the nested unit is named
`base_model.model.block._fsdp_wrapped_module.linear1`, which matches none of the full state dict's
clean keys, so its lora_A / lora_B are not written. The root's `head` is written. The expected
keys: get_peft_model_state_dict of the same PeftModel unwrapped.
Seen on peft 0.21.0, 0.21.1, 0.21.2 (torch 2.13.0+cpu); peft 0.20.0 (key-name based) and 0.22.0
(utils/integrations.py remove_torch_wrapper_names: the wrapper names dropped at any depth) write all.
One process, world size 1 (enough: the names come from the wrapping, not the sharding), gloo, CPU.
Exit 1 + "BUG PRESENT" if an expected key is missing from the file, 0 if the file holds them all.
"""

import os
import shutil
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from safetensors import safe_open
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

warnings.filterwarnings("ignore")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(8, 16)
        self.linear2 = nn.Linear(16, 8)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.block(x))


def peft_net():
    torch.manual_seed(0)
    return get_peft_model(Net(), LoraConfig(r=2, lora_alpha=4, target_modules=["linear1", "linear2", "head"]))


def main() -> int:
    import peft

    print(f"torch {torch.__version__}, peft {peft.__version__}")
    tmp = tempfile.mkdtemp()
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(tmp, "store"), 1), rank=0, world_size=1)
    try:
        expected = set(get_peft_model_state_dict(peft_net()))
        root = FSDP(
            peft_net(),
            use_orig_params=True,
            auto_wrap_policy=ModuleWrapPolicy({Block}),
            device_id=torch.device("cpu"),
        )
        root(torch.randn(3, 8)).sum().backward()  # a training step's forward/backward
        full = get_model_state_dict(root, options=StateDictOptions(full_state_dict=True))
        print("LoRA layer names under FSDP1:", sorted({n.rsplit(".lora_A", 1)[0] for n, _ in root.module.named_modules() if n.endswith(".lora_A")}))
        if dist.get_rank() == 0:
            out = os.path.join(tmp, "adapter")
            root.module.save_pretrained(out, state_dict=full)
            with safe_open(os.path.join(out, "adapter_model.safetensors"), "pt") as f:
                written = set(f.keys())
            missing = sorted(expected - written)
            print("written:", sorted(written))
            if missing:
                print("missing:", missing)
                print(f"BUG PRESENT: adapter_model.safetensors lacks {len(missing)} of {len(expected)} LoRA tensors")
                return 1
            print(f"BUG ABSENT: all {len(expected)} LoRA tensors written")
        return 0
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

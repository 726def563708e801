"""FSDP1's meta-device initialisation refuses torch's own nn.MultiheadAttention.

Limitation: FullyShardedDataParallel, given a module on the meta device and no param_init_fn, gives
each module storage (to_empty(recurse=False)) and calls its reset_parameters(), as its documentation
says. nn.MultiheadAttention manages in_proj_weight, in_proj_bias and out_proj's parameters but has
only the private _reset_parameters(), so wrapping any model that holds one (nn.TransformerEncoderLayer,
nn.Transformer) raises AttributeError: 'MultiheadAttention' object has no attribute 'reset_parameters'.
A user has to pass a param_init_fn, or patch the method in (the workaround the upstream issue gives).

Control: the same model built by its constructor wraps (printed as a control line).

Seen on: torch 2.13.0+cpu (gloo, CPU, 1 rank).
Upstream: https://github.com/pytorch/pytorch/issues/107909 (open, "Provide a reset_parameters() method
for MultiheadAttention to support FSDP meta device initialization").

Run: python reports/findings/repro/fsdp1_meta_init_mha_no_reset_parameters.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import os
import sys
import traceback

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def layer() -> nn.Module:
    return nn.TransformerEncoderLayer(12, 2, dim_feedforward=20, dropout=0.0, batch_first=True)


def main() -> int:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    try:
        dist.init_process_group("gloo", rank=0, world_size=1)
    except Exception:
        traceback.print_exc()
        return 2
    try:
        cpu = torch.device("cpu")
        FSDP(layer(), device_id=cpu)
        print("control: the constructor's model wraps")
        with torch.device("meta"):
            meta = layer()
        try:
            FSDP(meta, device_id=cpu)
        except AttributeError as exc:
            print(f"BUG PRESENT: FSDP(meta model) raised AttributeError: {exc}")
            return 1
        print("FIXED: FSDP materialised the meta-device model with nn.MultiheadAttention in it")
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

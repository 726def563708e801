"""FSDP1 (use_orig_params=True) with two optimizers over parts of one FSDP unit's parameters, as
torch.optim.Muon's documentation trains Muon (Muon on the 2-D weight, AdamW on the bias).
Saving their state raises through both documented APIs:
  FSDP.optim_state_dict(model, optim), called once per optimizer (it takes one), and
  torch.distributed.checkpoint.state_dict.get_state_dict(model, optimizers=[muon, adamw]):
"0.bias is not in the optimizer state. The FSDPParamInfo has the param keys ['0.bias', '0.weight']
while the optimizer has the param keys ['0.weight']" (_optim_utils._convert_state_with_orig_params).
The same model with plain DDP-style parameters, or FSDP2, saves both (a plain module and FSDP2 round-trip them bitwise). Exits 1 while either API raises, 0 when both give each optimizer's
state. One process, world size 1, gloo, CPU; torch only."""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main() -> int:
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)  # no port to collide on
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = FSDP(nn.Sequential(nn.Linear(8, 4)), use_orig_params=True, device_id=torch.device("cpu"))
        weights = [p for p in model.parameters() if p.ndim == 2]
        others = [p for p in model.parameters() if p.ndim != 2]
        optimizers = [torch.optim.Muon(weights, lr=0.02), torch.optim.AdamW(others, lr=3e-4)]
        model(torch.randn(2, 8)).sum().backward()
        for o in optimizers:
            o.step()
        failed = []
        for api, save in (
            ("FSDP.optim_state_dict per optimizer", lambda: [FSDP.optim_state_dict(model, o) for o in optimizers]),
            ("get_state_dict(model, [muon, adamw])", lambda: get_state_dict(model, optimizers)),
        ):
            try:
                save()
                print(f"ok: {api}")
            except RuntimeError as exc:
                print(f"BUG: {api} raised: {exc}")
                failed.append(api)
        if failed:
            print(f"BUG PRESENT: {len(failed)} of 2 APIs refused")
            return 1
        print("BUG ABSENT: both APIs gave each optimizer's state")
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

"""dcp_to_torch_save gives back an optimizer state dict keyed by parameter id with string keys.

Bug: DCP flattens a state dict into dotted paths, so an optimizer state dict keyed by parameter
id ({"state": {0: {...}}, "param_groups": [{"params": [0], ...}]}: what
torch.optim.Optimizer.state_dict() and FSDP.full_optim_state_dict() return) comes back from
torch.distributed.checkpoint.format_utils.dcp_to_torch_save keyed by the string "0" while its
param_groups still name the integer 0. dcp.load into a template keeps the template's keys, so only
the conversion to one torch.save file shows it. FSDP.scatter_full_optim_state_dict and
shard_full_optim_state_dict, given such a dict, raise KeyError: 0; Optimizer.load_state_dict
silently finds no state for parameter 0.

Correct behaviour: the keys come back as they were saved (or the conversion says it cannot).

Seen on: torch 2.13.0+cpu.
Upstream: https://github.com/pytorch/pytorch/issues/153842 (open: "checkpoints saved by DCP have all
state_dict converted to strings", seen through MultiStepLR's milestones) and
https://github.com/pytorch/pytorch/pull/171864 (closed: a maintainer prefers a broader DCP fix).

Run: python reports/findings/repro/dcp_to_torch_save_int_keys.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import os
import shutil
import socket
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    tmp = tempfile.mkdtemp()
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        dist.init_process_group("gloo", rank=0, world_size=1)
        model = torch.nn.Linear(3, 2)
        optim = torch.optim.AdamW(model.parameters(), lr=0.1)
        model(torch.ones(1, 3)).sum().backward()
        optim.step()
        saved = {"optim": optim.state_dict()}
        dcp.save(saved, checkpoint_id=os.path.join(tmp, "dcp"))
        dcp_to_torch_save(os.path.join(tmp, "dcp"), os.path.join(tmp, "one.pt"))
        back = torch.load(os.path.join(tmp, "one.pt"), weights_only=False)["optim"]
        keys = sorted(back["state"], key=str)
        params = back["param_groups"][0]["params"]
    except Exception:
        traceback.print_exc()
        print("SETUP FAILED")
        sys.stdout.flush()
        os._exit(2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"saved state keys {sorted(saved['optim']['state'])}, param_groups params {saved['optim']['param_groups'][0]['params']}"
    )
    print(f"converted state keys {keys!r}, param_groups params {params!r}")
    sys.stdout.flush()
    if any(isinstance(k, str) for k in keys) and all(isinstance(p, int) for p in params):
        print("BUG PRESENT: dcp_to_torch_save turned the integer parameter ids of the state into strings")
        sys.stdout.flush()
        os._exit(1)  # no teardown: the verdict never depends on the process group's shutdown
    print("FIXED: the converted state keeps its integer keys")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

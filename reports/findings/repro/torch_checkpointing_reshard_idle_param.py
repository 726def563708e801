"""torch_checkpointing with DefaultResharder cannot resume its own checkpoint when a trainable
parameter never got a gradient: "Checkpoint at ... is missing keys: ['optimizer::state.idle.weight',
'optimizer::state.idle.bias']".

A resharded optimizer item needs a live DTensor target (distributed_and_resharding.md: the load
goes into= the live state), so the optimizer is handed over as torch's
get_optimizer_state_dict(model, optim), as torchtitan hands it to a checkpointer. Saved after
training, that dict has no entry for "idle" (AdamW made no state for it; torch's _init_optim_state
returns early once any state exists). Built for the fresh optimizer of the resumed run, the same
call runs a zero-gradient step first and has state for every trainable parameter, "idle"
included. torch_checkpointing's load is template-driven: walk_utils._walk_mapping records every
template key the checkpoint lacks, and CheckpointLoader.load (checkpoint_loader.py) raises for
them with strict=True. Same asymmetry as torch's set_state_dict (pytorch/pytorch#192202).

Control: the same training saved through the plain manager (optimizer.state_dict(), loaded with
"optimizer": None and optimizer.load_state_dict, as tutorials.md) resumes.

Seen on: torch 2.13.0+cpu, torch_checkpointing 0.1.1; one process, gloo, FSDP2 (fully_shard).
Run: python reports/findings/repro/torch_checkpointing_reshard_idle_param.py
Exit 1 + "BUG PRESENT:" while the resharded load raises, 0 + "FIXED:" once it loads and every
saved optimizer tensor is back bitwise, 2 if the script itself cannot run here.
"""

import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
from torch.distributed.fsdp import fully_shard


class FrozenIdle(nn.Module):
    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(4, 4).requires_grad_(False)  # in the optimizer, never trained
        self.used = nn.Linear(4, 4)
        self.idle = nn.Linear(4, 4)  # trainable, in the optimizer, never in the forward

    def forward(self, x):
        return self.used(self.frozen(x))


def build():
    torch.manual_seed(0)
    model = FrozenIdle()
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def manager(reshard):
    from torch_checkpointing import CheckpointManager, ItemSpec
    from torch_checkpointing.default_resharder import DefaultResharder
    from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig

    config = CheckpointManager.Config.with_sync_save()
    if reshard:
        config.items = {key: ItemSpec(resharder=DefaultResharder()) for key in ("model", "optimizer")}
    config.storage_config = LocalFileSystemStorageConfig(use_direct_io=False)  # see torch_checkpointing_direct_io_ext4.py
    return CheckpointManager(config)


def optim_tensors(model, optim):
    osd = get_optimizer_state_dict(model, optim)
    return {f"{p}.{k}": v.full_tensor() if hasattr(v, "full_tensor") else v
            for p, s in osd["state"].items() for k, v in s.items()}


def run(tmp, reshard):
    """Train, save, resume into fresh objects. Returns (saved optimizer tensors, error or None, loaded)."""
    model, optim = build()
    for step in range(2):
        model(torch.randn(8, 4, generator=torch.Generator().manual_seed(step))).square().mean().backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
    saved = optim_tensors(model, optim)
    path = os.path.join(tmp, "reshard" if reshard else "plain")
    osd = get_optimizer_state_dict(model, optim) if reshard else optim.state_dict()
    m = manager(reshard)
    try:
        m.save(path, {"model": model.state_dict(), "optimizer": osd})
    finally:
        m.close()

    fresh, fresh_optim = build()
    template = get_optimizer_state_dict(fresh, fresh_optim) if reshard else None
    if reshard:
        print(f"  saved optimizer state for {sorted(osd['state'])}; fresh template for {sorted(template['state'])}")
    m = manager(reshard)
    try:
        restored = m.load(path, into={"model": fresh.state_dict(), "optimizer": template}, strict=True)
    except RuntimeError as exc:
        return saved, f"{type(exc).__name__}: {exc}", None
    finally:
        m.close()
    if reshard:
        set_optimizer_state_dict(fresh, fresh_optim, restored["optimizer"])
    else:
        fresh_optim.load_state_dict(restored["optimizer"])
    return saved, None, optim_tensors(fresh, fresh_optim)


def main():
    import torch_checkpointing

    print(f"torch {torch.__version__}, torch_checkpointing {torch_checkpointing.__version__}")
    tmp = tempfile.mkdtemp()
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
    try:
        saved, err, loaded = run(tmp, reshard=False)
        if err or any(not torch.equal(v, loaded.get(k, torch.empty(0))) for k, v in saved.items()):
            print(f"ERROR: the control (plain manager) did not resume: {err}")
            return 2
        print("control, plain manager (no resharder, optimizer.state_dict()): resumes bitwise")
        print("with DefaultResharder (template get_optimizer_state_dict of the fresh optimizer):")
        saved, err, loaded = run(tmp, reshard=True)
        if err is not None:
            if "is missing keys" not in err or "idle" not in err:
                print(f"ERROR: the load raised something else: {err}")
                return 2
            print(f"BUG PRESENT: the resharded load of its own checkpoint raised {err}")
            return 1
        differ = sorted(k for k, v in saved.items() if k not in loaded or not torch.equal(v, loaded[k]))
        if differ:
            print(f"BUG PRESENT (another way): the load returned, but these optimizer tensors differ: {differ}")
            return 1
        print("FIXED: the resharded checkpoint loads with strict=True and the optimizer state is back bitwise")
        return 0
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            traceback.print_exc()


if __name__ == "__main__":
    try:
        code = main()
    except Exception:
        traceback.print_exc()
        code = 2
    sys.stdout.flush()
    os._exit(code)  # no teardown of the library's threads can change the verdict

"""torch_checkpointing cannot save an item with a resharder from more than one rank on a
CPU-only host: the sharding metadata is gathered on CUDA tensors. AssertionError: Torch not
compiled with CUDA enabled (or a CUDA error on a machine without a GPU).

Bug: with ItemSpec(resharder=DefaultResharder()) on an item (the documented path to load across
layouts, docs/distributed_and_resharding.md), CheckpointManager.save aggregates each item's
sharding metadata across ranks in DefaultMetadataManager._all_gather_pickled_data
(torch_checkpointing/metadata_manager.py), which makes its tensors with device="cuda" and
.cuda(), whatever the process group's backend. The docs name CUDA only for the async staging
defaults (and give a CPU configuration for those); nothing says resharding needs CUDA.

Control: the same save without a resharder writes the checkpoint.

Seen on: torch_checkpointing 0.1.1, torch 2.13.0+cpu, gloo, 2 ranks, a DTensor sharded over
them, the synchronous saver (no staging at all).
Run: python reports/findings/repro/torch_checkpointing_reshard_needs_cuda.py
On a host where CUDA is available it cannot show the bug: exit 2.
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure
(2 + "CANNOT SHOW HERE:" where the machine lacks what it needs).
"""

import datetime
import json
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
TIMEOUT_S = 180  # hang guard only


def save(tmp, name, reshard):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch_checkpointing import CheckpointManager, ItemSpec
    from torch_checkpointing.default_resharder import DefaultResharder
    from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig

    mesh = init_device_mesh("cpu", (WORLD,))
    torch.manual_seed(0)
    weight = distribute_tensor(torch.randn(4, 3), mesh, [Shard(0)])
    items = {"model": ItemSpec(resharder=DefaultResharder())} if reshard else {}
    config = CheckpointManager.Config.with_sync_save()
    config.items = items
    config.storage_config = LocalFileSystemStorageConfig(use_direct_io=False)  # see torch_checkpointing_direct_io_ext4.py
    manager = CheckpointManager(config)
    try:
        manager.save(os.path.join(tmp, name), {"model": {"weight": weight}})
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        manager.close()
    return ""


def worker(rank, tmp):
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        res = {"control": save(tmp, "control", reshard=False)}
        dist.barrier()
        res["reshard"] = save(tmp, "reshard", reshard=True)
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    os._exit(0)  # the verdict is written; no teardown can change the exit code


def main():
    import torch_checkpointing

    print(f"torch {torch.__version__}, torch_checkpointing {torch_checkpointing.__version__}")
    if torch.cuda.is_available():
        print("CANNOT SHOW HERE: CUDA is available here: the bug shows on a CPU-only host")
        return 2
    tmp = tempfile.mkdtemp()
    ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while not all(os.path.exists(os.path.join(tmp, f"rank{r}.json")) for r in range(WORLD)):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
        time.sleep(0.2)
    with open(os.path.join(tmp, "rank0.json")) as f:
        res = json.load(f)
    if "setup_error" in res:
        print(f"rank 0 setup failure:\n{res['setup_error']}")
        return 2
    if res["control"]:
        print(f"ERROR: the control (no resharder) failed too: {res['control']}")
        return 2
    print("control, no resharder: the 2-rank save writes the checkpoint")
    if res["reshard"]:
        print(f"BUG PRESENT: with ItemSpec(resharder=DefaultResharder()) the 2-rank save on gloo raised {res['reshard']}")
        return 1
    print("FIXED: a save with a resharder works on a CPU-only host")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

"""torch.save of a DTensor whose local tensor is a view at a non-zero storage offset raises:
"Attempted to access the data pointer on an invalid python storage".

Where users meet it: FSDP1 over tensor parallelism (a (dp, tp) mesh, use_orig_params=False) under
StateDictType.FULL_STATE_DICT: FSDP.optim_state_dict returns the optimizer state of the
tensor-parallel parameters as DTensors made (post_unflatten_transform -> DTensor.from_local) on
views into the all-gathered flat buffer, and torch.save of it fails on rank 0 (the suite's cells
fsdp1_tp-sd_full-*). This script shows the cause alone, in one process.

Bug: DTensor's constructor copies the local tensor's storage offset onto the wrapper (since
https://github.com/pytorch/pytorch/pull/167597), so the wrapper's data_ptr() is offset x itemsize,
not 0; Tensor._reduce_ex_internal (torch/_tensor.py) then skips its wrapper-subclass branch and
pickles the wrapper's storage, which holds no data, and torch.save fails in persistent_id. The
same DTensor on a view at offset 0 saves and loads back (the control).

Correct behaviour: any DTensor saves, whatever the offset of its local tensor.

Seen on: torch 2.13.0+cpu and 2.15.0 (its CUDA build on the CPU).
Upstream: not found (issues and PRs searched); the offset copy came with PR 167597 (its draft
https://github.com/pytorch/pytorch/pull/167578).

Run: python reports/findings/repro/dtensor_offset_view_torch_save.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import io
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist


def save_and_load(offset, mesh):
    from torch.distributed.tensor import DTensor, Shard

    base = torch.arange(20.0)
    dtensor = DTensor.from_local(base[offset : offset + 4], mesh, [Shard(0)], run_check=False)
    try:
        buf = io.BytesIO()
        torch.save(dtensor, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok" if torch.equal(loaded.to_local(), dtensor.to_local()) else "loaded other values"


def main():
    from torch.distributed.device_mesh import init_device_mesh

    store = tempfile.mkdtemp()
    dist.init_process_group("gloo", init_method=f"file://{store}/store", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        control, offset = save_and_load(0, mesh), save_and_load(8, mesh)
    finally:
        dist.destroy_process_group()
    print(f"torch {torch.__version__}: local tensor at offset 0: {control}; at offset 8: {offset}")
    if control != "ok":
        print("ERROR: the control (a DTensor on a view at offset 0) did not round-trip; cannot judge")
        return 2
    if offset != "ok":
        print(f"BUG PRESENT: torch.save of a DTensor on a view at a non-zero offset: {offset}")
        return 1
    print("FIXED: a DTensor on a view at a non-zero offset saves and loads back")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

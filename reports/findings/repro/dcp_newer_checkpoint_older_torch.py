"""A DCP checkpoint written by torch 2.15 cannot be read by torch 2.14 or older.

torch 2.15 added ``strides`` to ``torch.distributed.checkpoint.metadata.TensorProperties`` (PR
pytorch/pytorch#194251, "Safely preserve tensor strides"); its ``__getstate__`` now always pickles a
6-tuple into the ``.metadata`` file, even when ``strides`` is None. ``TensorProperties.__setstate__``
in 2.9.1 ... 2.14.1 unpacks exactly 5 values, so reading the metadata fails and ``dcp.load`` reports
it as ``AssertionError: metadata is None; global metadata read failed: too many values to unpack
(expected 5)`` (2.14.1) or a bare ``AssertionError`` from ``assert metadata is not None`` (2.9.1, which
predates #177739's better message). Every tensor in a DCP checkpoint has a TensorProperties, so a
plain-tensor state dict (no DTensor, no ShardedTensor) is enough. Older -> newer loads work (2.15
still accepts the 5-tuple). The DCP docs give no cross-version guarantee: "There are no guarantees
of Backwards Compatibility across PyTorch versions for saved state_dicts." (dcp.save docstring).

Seen (the suite's cross-version grid, 2 ranks, gloo): 2.15.0 -> 2.14.1 and 2.15.0 -> 2.9.1 fail;
2.9.1 -> 2.15.0 and every other adjacent pair pass.

Run (one process, gloo world of 1, CPU):
    /path/to/torch-X/bin/python dcp_newer_checkpoint_older_torch.py save DIR
    /path/to/torch-Y/bin/python dcp_newer_checkpoint_older_torch.py load DIR
``load`` exits 1 + "BUG PRESENT:" if the load raises or a value differs bitwise from what ``save``
wrote (kept as raw bytes in DIR/expected.json), 0 + "FIXED:" if it loads right, 2 on a usage or
setup failure. ``save`` exits 0 when it wrote the checkpoint.
"""

import datetime
import json
import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def raw(t):
    """Version-independent record of a tensor: dtype, shape and its bytes in hex."""
    t = t.detach().cpu().contiguous().flatten()
    return {"dtype": str(t.dtype), "shape": list(t.shape), "hex": bytes(t.view(torch.uint8).tolist()).hex()}


def init():
    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )


def state():
    torch.manual_seed(0)
    return {"fc.weight": torch.randn(6, 4), "fc.bias": torch.randn(6), "step": torch.tensor(3.0)}


def save(d):
    sd = state()
    dcp.save(sd, checkpoint_id=os.path.join(d, "checkpoint"))
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"torch": torch.__version__, "values": {k: raw(v) for k, v in sd.items()}}, f)
    print(f"saved with torch {torch.__version__} to {d}")
    return 0


def load(d):
    with open(os.path.join(d, "expected.json")) as f:
        expected = json.load(f)
    sd = {k: torch.zeros_like(v) for k, v in state().items()}  # templates of the right shape/dtype
    where = f"saved by torch {expected['torch']}, loaded by torch {torch.__version__}"
    try:
        dcp.load(sd, checkpoint_id=os.path.join(d, "checkpoint"))
    except BaseException as e:  # DCP's CheckpointException derives from BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        last = [line for line in str(e).splitlines() if line.strip()][-1:] or [""]
        print(f"BUG PRESENT: {where}: dcp.load raised {type(e).__name__}; innermost error: {last[0].strip()}")
        try:  # the cause, which 2.9.1's bare AssertionError hides
            dcp.FileSystemReader(os.path.join(d, "checkpoint")).read_metadata()
        except Exception as m:
            print(f"  FileSystemReader.read_metadata() alone raises {type(m).__name__}: {m}")
        return 1
    bad = [k for k, v in expected["values"].items() if raw(sd[k]) != v]
    if bad:
        print(f"BUG PRESENT: {where}: dcp.load returned but values differ bitwise: {bad}")
        return 1
    print(f"FIXED: {where}: all {len(sd)} tensors equal bitwise")
    return 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "load"):
        print(__doc__)
        print("usage: python dcp_newer_checkpoint_older_torch.py save|load DIR")
        return 2
    mode, d = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    init()
    try:
        return save(d) if mode == "save" else load(d)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # a setup failure (a failed load is reported by load() itself)
        traceback.print_exc()
        sys.exit(2)

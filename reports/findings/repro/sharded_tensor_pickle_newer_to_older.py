"""A ShardedTensor pickled with torch.save by torch 2.15 cannot be torch.load-ed by torch 2.14 or older.

torch 2.15 added ``strides`` to ``torch.distributed._shard.sharded_tensor.metadata.TensorProperties``
(PR pytorch/pytorch#194251, "Safely preserve tensor strides", which changed DCP's own
TensorProperties the same way); its ``__getstate__`` now always returns a 6-tuple, even when
``strides`` is None. ``TensorProperties.__setstate__`` in 2.9.1 ... 2.14.1 unpacks exactly 5 values,
so unpickling any ShardedTensor written by 2.15 raises ``ValueError: too many values to unpack
(expected 5)`` inside ``torch.load``. FSDP1's SHARDED_STATE_DICT and LOCAL_STATE_DICT state dicts
hold ShardedTensors (by default), so per-rank ``torch.save`` files of them are affected; this script
builds the ShardedTensor directly. 2.15 still reads the old 5-tuple (older -> newer works). No
PyTorch doc promises that pickled ShardedTensors load in another (let alone an older) version.

Seen (the suite's cross-version grid, FSDP1 sd_sharded / sd_local per-rank torch.save files,
2 ranks, gloo): 2.15.0 -> 2.14.1 and 2.15.0 -> 2.9.1 fail; the other adjacent pairs pass.

Run (one process, gloo world of 1, CPU):
    /path/to/torch-X/bin/python sharded_tensor_pickle_newer_to_older.py save DIR
    /path/to/torch-Y/bin/python sharded_tensor_pickle_newer_to_older.py load DIR
``load`` exits 1 + "BUG PRESENT:" if torch.load raises or the local shard differs bitwise from what
``save`` wrote (kept as raw bytes in DIR/expected.json), 0 + "FIXED:" if it loads right, 2 on a usage
or setup failure. ``save`` exits 0 when it wrote the file.
"""

import datetime
import json
import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards


def raw(t):
    """Version-independent record of a tensor: dtype, shape and its bytes in hex."""
    t = t.detach().cpu().contiguous().flatten()
    return {"dtype": str(t.dtype), "shape": list(t.shape), "hex": bytes(t.view(torch.uint8).tolist()).hex()}


def init():
    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )


def save(d):
    torch.manual_seed(0)
    local = torch.randn(6, 4)
    st = init_from_local_shards([Shard.from_tensor_and_offsets(local, [0, 0], rank=0)], 6, 4)
    torch.save({"fc.weight": st}, os.path.join(d, "rank0.pt"))
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"torch": torch.__version__, "fc.weight": raw(local)}, f)
    print(f"saved with torch {torch.__version__} to {d}")
    return 0


def load(d):
    with open(os.path.join(d, "expected.json")) as f:
        expected = json.load(f)
    where = f"saved by torch {expected['torch']}, loaded by torch {torch.__version__}"
    try:
        st = torch.load(os.path.join(d, "rank0.pt"), weights_only=False)["fc.weight"]
        shards = st.local_shards()
        got = raw(shards[0].tensor)
    except Exception as e:
        print(f"BUG PRESENT: {where}: torch.load / local_shards raised {type(e).__name__}: {e}")
        return 1
    if len(shards) != 1 or got != expected["fc.weight"]:
        print(f"BUG PRESENT: {where}: loaded, but the local shard differs bitwise ({len(shards)} shards)")
        return 1
    print(f"FIXED: {where}: ShardedTensor local shard equal bitwise")
    return 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "load"):
        print(__doc__)
        print("usage: python sharded_tensor_pickle_newer_to_older.py save|load DIR")
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

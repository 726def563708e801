"""HuggingFaceStorageWriter consolidation writes every 0-dim tensor (a scalar parameter) as 0.

Bug: dcp.save(sd, storage_writer=HuggingFaceStorageWriter(path, save_distributed=True,
enable_consolidation=True)) writes sharded/shard-*.safetensors correctly, then finish() ->
consolidate_safetensors_files -> _process_output_file allocates a zeroed buffer of
prod(shape) * dtype_size bytes per tensor (4 for a float32 scalar, as prod([]) == 1) and calls
_write_sub_tensor_to_file_optimized, which starts with "# Handle empty tensors / if not tensor_shape
or not sub_tensor_shape: return" (torch/distributed/checkpoint/_consolidate_hf_safetensors.py,
lines 386-388 in 2.13.0 and 2.15.0). A 0-dim tensor's shape is [], so nothing is copied and the zeroed
buffer is written. No error, no warning: a learnable scalar such as CLIP's
logit_scale = nn.Parameter(torch.tensor(1.25)) comes back as 0.0 from safetensors.torch.load_file and
from dcp.load with HuggingFaceStorageReader, which reads the consolidated file.

Correct behaviour: the consolidated model-00001-of-00001.safetensors holds logit_scale == 1.25 (bitwise),
as the sharded file it was built from does. Control: the 2-D tensor "w" beside it comes back exact.

Expected output while the bug is present (exit 1):
  sharded file (before consolidation): logit_scale=1.25 w exact=True
  consolidated file, safetensors.load_file: logit_scale=0.0 w exact=True
  dcp.load + HuggingFaceStorageReader: logit_scale=0.0 w exact=True
  BUG PRESENT: the consolidated checkpoint holds the 0-dim tensor 'logit_scale' as 0.0, not 1.25
Exit 0 + "FIXED:" if every read gives 1.25. Never exits 2: a failure that stops the check prints
"ERROR: cannot judge" and exits 0 (the bug is not shown). Needs `safetensors`; one process, no_dist=True.

Seen on: torch 2.13.0+cpu, 2.15.0+cu132 (CPU), safetensors 0.8.0.
Upstream: not reported to pytorch/pytorch as far as searched; the integer-dtype fixes for #192485
(PRs #192502, #192726) change only the dtype size. NVIDIA-NeMo/Automodel PR #301 fixed it in its backport.
Run: python reports/findings/repro/hf_consolidation_zero_dim_written_as_zero.py
"""

import glob
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed.checkpoint as dcp

VALUE = 1.25


def same(a, b):
    """Bitwise equal: same dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def main():
    warnings.filterwarnings("ignore")  # "torch.distributed is disabled ... single process" warning
    from safetensors.torch import load_file

    print(f"torch {torch.__version__}")
    torch.manual_seed(0)
    sd = {"logit_scale": torch.tensor(VALUE), "w": torch.randn(3, 4)}
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        writer = dcp.HuggingFaceStorageWriter(tmp, save_distributed=True, enable_consolidation=True)
        dcp.save(sd, storage_writer=writer, no_dist=True)
        for name, pattern in [
            ("sharded file (before consolidation)", "sharded/*.safetensors"),
            ("consolidated file, safetensors.load_file", "*.safetensors"),
        ]:
            loaded = {}
            for f in sorted(glob.glob(os.path.join(tmp, pattern))):
                loaded.update(load_file(f))
            got[name] = loaded
        target = {"logit_scale": torch.tensor(-1.0), "w": torch.zeros(3, 4)}
        try:
            dcp.load(target, storage_reader=dcp.HuggingFaceStorageReader(tmp), no_dist=True)
            got["dcp.load + HuggingFaceStorageReader"] = target
        except BaseException as e:  # CheckpointException is a BaseException
            print(f"dcp.load + HuggingFaceStorageReader: raised {type(e).__name__}: {str(e)[:200]}")
    for name, t in got.items():
        s = t.get("logit_scale")
        shown = None if s is None else s.tolist()
        print(f"{name}: logit_scale={shown} w exact={'w' in t and same(t['w'], sd['w'])}")
    ok = {n: "logit_scale" in t and same(t["logit_scale"], sd["logit_scale"]) for n, t in got.items()}
    if not ok.pop("sharded file (before consolidation)", False):
        print("ERROR: cannot judge, the sharded file written before consolidation lacks the scalar")
        return 0
    bad = [n for n, good in ok.items() if not good]
    if bad:
        vals = sorted({str(got[n].get("logit_scale", torch.tensor([])).tolist()) for n in bad})
        print(
            f"BUG PRESENT: the consolidated checkpoint holds the 0-dim tensor 'logit_scale' as "
            f"{', '.join(vals)}, not {VALUE} (read by: {'; '.join(bad)})"
        )
        return 1
    print(f"FIXED: every read of the consolidated checkpoint gives logit_scale == {VALUE} bitwise")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # never exit 2: report, and do not claim the bug
        print(f"ERROR: cannot judge, the check itself failed: {type(e).__name__}: {e}")
        sys.exit(0)

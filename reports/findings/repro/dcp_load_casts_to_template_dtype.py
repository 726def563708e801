"""dcp.load silently casts float32 checkpoint tensors into a bfloat16 template (values rounded to bf16).

Behaviour: torch.distributed.checkpoint.load writes in place into the template state dict it is
given. When a template tensor is bfloat16 and the checkpoint holds the same key as float32, the load
completes with no error and no warning and the values are cast to the template dtype (bf16-rounded).
Loading that template into the float32 model then gives bf16-rounded float32 weights. The copy is
FileSystemReader.read_data -> target_tensor.copy_(tensor) in torch/distributed/checkpoint/
filesystem.py, which checks sizes ("mismatch sizes") but not dtypes; create_default_local_load_plan
in default_planner.py likewise raises on a size mismatch ("Size mismatch between saved ...") but
never compares TensorStorageMetadata.properties.dtype with the template's dtype. The same happens
whatever builds the template (plain state_dict, DDP, FSDP1 state_dict APIs, get_state_dict for
FSDP1/FSDP2); this repro uses a plain module so nothing but DCP is involved.

Correct behaviour (as the conformance suite expects): a dtype mismatch between the checkpoint and
the template is reported (an error, or at least a warning) rather than silently narrowing the
saved values. Not promised by the docs: the DCP docs say only that DCP "operates in place, meaning
that the model should allocate its data first and DCP uses that storage instead"; dtype conversion
on load is not documented either way. nn.Module.load_state_dict (assign=False) casts the same way.
Controls printed: a float32 template restores the checkpoint bitwise, and a wrong-shape template
raises, so DCP checks sizes but not dtypes.

Seen on: torch 2.13.0+cpu (gloo, CPU, 1 rank).
Upstream: https://github.com/pytorch/pytorch/issues/187138 (open, labels "triage review": "[DCP]
load silently casts checkpoint tensors to the template dtype, truncating precision without any
warning") and https://github.com/pytorch/pytorch/pull/187257 (open, unreviewed: raise RuntimeError
on a dtype mismatch in FileSystemReader).

Run: python reports/findings/repro/dcp_load_casts_to_template_dtype.py
Exit 1 + "BEHAVIOUR PRESENT:" if the bf16 template is filled silently (values bf16-rounded),
0 + "FIXED:" if the load raises or warns about the dtype, 2 only on setup failure.
"""

import datetime
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn

WORLD = 1
TIMEOUT_S = 180  # hang guard only; generous because the 2-core machine may be shared


def build():
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    with torch.no_grad():
        # values with many mantissa bits, so bf16 rounding is visible
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 3.0 + 1.0 / 3.0)
    return model


def try_load(template, ckpt):
    """dcp.load into template; report what was raised or warned (ignoring unrelated warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            dcp.load(template, checkpoint_id=ckpt)
            raised = None
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - CheckpointException is a BaseException
            # CheckpointException carries the rank's traceback; its last line is the cause
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            raised = f"{type(e).__name__}: {lines[-1][:300] if lines else ''}"
    dtype_warnings = [
        str(w.message)[:300]
        for w in caught
        if "dtype" in str(w.message).lower() or "precision" in str(w.message).lower()
    ]
    return raised, dtype_warnings


def run(tmp):
    ckpt = os.path.join(tmp, "ckpt")
    model = build()
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    dcp.save({"model": model.state_dict()}, checkpoint_id=ckpt)

    # control 1: float32 template restores bitwise
    fresh = nn.Linear(8, 8)
    tmpl32 = {"model": fresh.state_dict()}
    r32, w32 = try_load(tmpl32, ckpt)
    fresh.load_state_dict(tmpl32["model"])
    ctl_bitwise = r32 is None and all(
        torch.equal(fresh.state_dict()[k], saved[k]) for k in saved
    )

    # the case: bfloat16 template for a float32 checkpoint
    tmpl16 = {"model": {k: torch.zeros_like(v, dtype=torch.bfloat16) for k, v in saved.items()}}
    r16, w16 = try_load(tmpl16, ckpt)

    # control 2: a wrong-shape template is rejected (DCP checks sizes); run last, it raises
    tmpl_shape = {"model": {k: torch.zeros(v.numel() + 1) for k, v in saved.items()}}
    r_shape, _ = try_load(tmpl_shape, ckpt)

    out = {
        "ctl_fp32_bitwise": ctl_bitwise,
        "ctl_fp32_raised": r32,
        "ctl_shape_raised": r_shape,
        "bf16_raised": r16,
        "bf16_dtype_warnings": w16,
    }
    if r16 is None:
        target = nn.Linear(8, 8)  # float32 model
        target.load_state_dict(tmpl16["model"])
        loaded = target.state_dict()
        k = "weight"
        out.update(
            {
                "template_dtype_after": str(tmpl16["model"][k].dtype),
                "checkpoint_dtype": str(saved[k].dtype),
                "equals_bf16_rounding": all(
                    torch.equal(loaded[n], saved[n].to(torch.bfloat16).to(torch.float32))
                    for n in saved
                ),
                "bitwise_equal_to_saved": all(torch.equal(loaded[n], saved[n]) for n in saved),
                "max_abs_err": max(float((loaded[n] - saved[n]).abs().max()) for n in saved),
                "sample_saved": float(saved[k].flatten()[0]),
                "sample_loaded": float(loaded[k].flatten()[0]),
            }
        )
    return out


def worker(rank, tmp):
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/store",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        res = run(tmp)
    except BaseException:  # CheckpointException derives from BaseException
        res = {"setup_error": traceback.format_exc()}
    # write the result before teardown, so a teardown crash cannot change the verdict
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def main():
    tmp = tempfile.mkdtemp()
    ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            if ctx.join(timeout=1):
                break
        except Exception as e:  # a rank died (e.g. in teardown); judge by the result file if any
            print(f"note: worker exited abnormally: {type(e).__name__}")
            break
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
    path = os.path.join(tmp, "rank0.json")
    if not os.path.exists(path):
        print("ERROR: rank 0 wrote no result")
        return 2
    with open(path) as f:
        res = json.load(f)
    if "setup_error" in res:
        print(f"rank 0 setup failure:\n{res['setup_error']}")
        return 2
    print(
        f"control fp32 template: raised={res['ctl_fp32_raised']}, "
        f"restored bitwise={res['ctl_fp32_bitwise']}"
    )
    print(f"control wrong-shape template: raised={res['ctl_shape_raised']}")
    if not res["ctl_fp32_bitwise"]:
        print("ERROR: a float32 template did not restore the checkpoint bitwise; cannot judge")
        return 2
    if res["bf16_raised"] is not None or res["bf16_dtype_warnings"]:
        print(
            f"FIXED: bf16 template for a float32 checkpoint is reported: "
            f"raised={res['bf16_raised']}, warnings={res['bf16_dtype_warnings']}"
        )
        return 0
    if res["bitwise_equal_to_saved"]:
        print("FIXED: bf16 template load neither raised nor lost precision (values bitwise equal)")
        return 0
    print(
        f"BEHAVIOUR PRESENT: dcp.load filled a {res['template_dtype_after']} template from a "
        f"{res['checkpoint_dtype']} checkpoint with no error or dtype warning; after "
        f"load_state_dict into the float32 model the weights equal the bf16-rounded saved values "
        f"({res['equals_bf16_rounding']}), max abs error {res['max_abs_err']:.3g} "
        f"(e.g. saved {res['sample_saved']!r} -> loaded {res['sample_loaded']!r})"
    )
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

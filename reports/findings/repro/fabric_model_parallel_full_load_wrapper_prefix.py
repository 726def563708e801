"""Fabric ModelParallelStrategy cannot load its own full checkpoint when parallelize_fn wraps blocks.

Bug: with ModelParallelStrategy(save_distributed_checkpoint=False), fabric.save() writes the model with
get_model_state_dict(full_state_dict=True), whose keys have no wrapper prefixes (DSD strips
`_checkpoint_wrapped_module.` and `_orig_mod.`). fabric.load() then goes through
_load_raw_module_state (lightning/fabric/strategies/model_parallel.py), which walks
module.named_modules() and the direct parameters of each submodule and looks each raw name up in the
checkpoint. When the parallelize_fn wrapped a block with checkpoint_wrapper (activation checkpointing) or
torch.compile, the raw names contain `_checkpoint_wrapped_module.` or `_orig_mod.`, so the load raises
KeyError "The model contains a key 'layers.0._checkpoint_wrapped_module.attention_norm.weight' that does not
exist in the loaded checkpoint". The same configuration cannot load a checkpoint it just wrote. Lightning's
own Llama example (examples/fabric/tensor_parallel/parallelism.py) applies checkpoint_wrapper per block
in its parallelize function.

Side note printed per case (not part of the verdict): the KeyError suggests strict=False; with it fabric.load
returns without error but leaves every parameter under a wrapper at its fresh value.

Correct behaviour: the load succeeds and the fresh model's full state dict equals the saved one bitwise,
as in the control case with no wrappers (printed first).

Cases: control (fully_shard per block, no wrapper), checkpoint_wrapper per block before fully_shard, and
torch.compile(backend="aot_eager") per block before fully_shard (torchtitan ordering). Either wrapper case
failing counts. Nothing is run through the compiled blocks, so nothing is compiled.
2 CPU processes, gloo, FSDP2 (data_parallel_size=2). Seeded; no training step.

Seen on: torch 2.13.0+cpu and 2.15.0, lightning 2.6.6 (same code on Lightning master, July 2026).
Upstream: not found as an issue or PR. Lightning's tests mention it in a TODO
(tests/tests_fabric/strategies/test_model_parallel_integration.py: "TODO: Re-enable activation checkpointing").
Run: python reports/findings/repro/fabric_model_parallel_full_load_wrapper_prefix.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import json
import os
import socket
import sys
import tempfile
import time
import traceback

import torch
import torch.multiprocessing as mp
from torch import nn

WORLD = 2
TIMEOUT_S = 240  # hang guard only
CASES = ("control", "checkpoint_wrapper", "compile")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.LayerNorm(8)
        self.attention = nn.Linear(8, 8)

    def forward(self, x):
        return x + self.attention(self.attention_norm(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict({"0": Block(), "1": Block()})
        self.output = nn.Linear(8, 4)

    def forward(self, x):
        for block in self.layers.values():
            x = block(x)
        return self.output(x)


def make_parallelize_fn(wrap):
    def parallelize_fn(model, device_mesh):
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        from torch.distributed.fsdp import fully_shard

        mesh = device_mesh["data_parallel"]
        for name, block in list(model.layers.items()):
            if wrap == "checkpoint_wrapper":
                block = checkpoint_wrapper(block)
            elif wrap == "compile":
                block = torch.compile(block, backend="aot_eager")
            fully_shard(block, mesh=mesh)
            model.layers[name] = block
        return fully_shard(model, mesh=mesh)

    return parallelize_fn


def new_net(seed):
    torch.manual_seed(seed)
    net = Net()
    with torch.no_grad():
        for p in net.parameters():
            p.normal_()  # every tensor (LayerNorm included) differs between seeds
    return net


def full_sd(model):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {k: v.detach().cpu().clone() for k, v in sd.items()}


def same(a, b):
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def case(tmp, wrap):
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import ModelParallelStrategy

    strategy = ModelParallelStrategy(
        make_parallelize_fn(wrap),
        data_parallel_size=WORLD,
        tensor_parallel_size=1,
        save_distributed_checkpoint=False,
    )
    fabric = Fabric(accelerator="cpu", devices=WORLD, strategy=strategy)
    fabric.launch()
    path = os.path.join(tmp, f"{wrap}.ckpt")
    model = fabric.setup_module(new_net(0))
    raw_name = next(n for n, _ in model.module.named_parameters() if n.endswith("attention_norm.weight"))
    saved = full_sd(model)
    fabric.save(path, {"model": model})
    file_keys = set(torch.load(path, map_location="cpu", weights_only=True)["model"].keys())
    fresh = fabric.setup_module(new_net(1))
    before = full_sd(fresh)
    res = {
        "raw_name": raw_name,
        "raw_name_in_file": raw_name in file_keys,
        "differs_before": not same(saved, before),
    }
    try:
        fabric.load(path, {"model": fresh})
        res["error"] = None
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    res["equal_after"] = same(saved, full_sd(fresh))
    # Side observation (not part of the verdict): the KeyError suggests strict=False; with it the load returns
    # without error but skips every parameter under a wrapper.
    lax = fabric.setup_module(new_net(1))
    try:
        fabric.load(path, {"model": lax}, strict=False)
        after = full_sd(lax)
        res["lax"] = sorted(k for k in saved if not torch.equal(saved[k], after[k]))
    except Exception as e:
        res["lax"] = f"{type(e).__name__}: {e}"
    fabric.barrier()
    return res


def worker(rank, tmp, port):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(WORLD))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        res = {c: case(tmp, c) for c in CASES}
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    with open(os.path.join(tmp, f"rank{rank}.json"), "w") as f:
        json.dump(res, f, default=repr)
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
    sys.stdout.flush()
    os._exit(0)  # result is in the JSON file; skip interpreter teardown


def main():
    tmp = tempfile.mkdtemp()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.start_processes(worker, args=(tmp, port), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            if ctx.join(timeout=1):
                break
        except Exception as e:  # a rank died after writing (or before): judge by the files
            print(f"note: a rank exited abnormally: {type(e).__name__}")
            break
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
            return 2
    results = []
    for r in range(WORLD):
        try:
            with open(os.path.join(tmp, f"rank{r}.json")) as f:
                results.append(json.load(f))
        except OSError:
            print(f"ERROR: rank {r} wrote no result")
            return 2
    for r, res in enumerate(results):
        if "setup_error" in res:
            print(f"rank {r} setup failure:\n{res['setup_error']}")
            return 2
    print(f"torch {torch.__version__}")
    for c in CASES:
        res = results[0][c]
        status = "load OK" if res["error"] is None else f"load raised {res['error']}"
        print(f"[{c}] model param '{res['raw_name']}' is a key in the saved file: {res['raw_name_in_file']}")
        print(f"[{c}] {status}; fresh weights equal saved after load: {res['equal_after']}")
        lax = res["lax"]
        lax = (
            f"raised {lax}"
            if isinstance(lax, str)
            else f"returned; {len(lax)} tensors still differ from saved {lax}"
        )
        print(f"[{c}] (side note) fabric.load(strict=False) {lax}")
    if not all(rr[c]["differs_before"] for rr in results for c in CASES):
        print("ERROR: fresh and saved weights are identical before load; the test cannot tell them apart")
        return 2
    ctrl = [rr["control"] for rr in results]
    if any(x["error"] is not None or not x["equal_after"] for x in ctrl):
        print("ERROR: control (no wrappers) full save/load round trip failed; cannot judge")
        return 2
    bad = [
        c for c in CASES[1:] if any(rr[c]["error"] is not None or not rr[c]["equal_after"] for rr in results)
    ]
    if bad:
        msgs = "; ".join(f"{c}: {results[0][c]['error'] or 'loaded weights differ from saved'}" for c in bad)
        print(
            f"BUG PRESENT: ModelParallelStrategy full checkpoint saved by fabric.save cannot be loaded back by the "
            f"same configuration when parallelize_fn wraps blocks ({msgs}). The control without wrappers "
            f"round-trips bitwise."
        )
        return 1
    print("FIXED: full checkpoints round-trip bitwise with checkpoint_wrapper and torch.compile'd blocks")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except Exception:
        traceback.print_exc()
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

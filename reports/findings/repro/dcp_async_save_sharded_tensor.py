"""dcp.async_save fails on every rank for an FSDP1 sharded state dict (ShardedTensor values).

Bug: get_state_dict(model, optim) of an FSDP1 (FULL_SHARD) model holds ShardedTensors. dcp.save writes it,
but dcp.async_save(...) raises "torch function 'data_ptr' ... not supported for ShardedTensor!": the
default stager (DefaultStager -> StateDictStager._offload_tensor) calls x.data_ptr() on every
torch.Tensor subclass, and ShardedTensor's __torch_function__ does not support data_ptr.

Correct behaviour: async_save stages and writes the same state dict that save accepts (save's docstring
lists ShardedTensor as supported), or says up front that ShardedTensor is not supported.

Seen on: torch 2.13.0+cpu and 2.11.0 (gloo, CPU, 2 ranks).
Run: python reports/findings/repro/dcp_async_save_sharded_tensor.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import datetime, json, os, sys, tempfile, time, traceback, warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy

WORLD = 2
TIMEOUT_S = 150  # hang guard only; the script normally takes ~15 s


def attempt(fn):
    try:
        fn()
    except BaseException as e:  # CheckpointException is a BaseException
        msg = " ".join(str(e).split())
        return f"{type(e).__name__}: {msg if len(msg) < 160 else msg[:60] + ' ... ' + msg[-60:]}"


def worker(rank, tmp):  # an exception here reaches main() through ctx.join() and gives exit 2
    warnings.filterwarnings("ignore")  # ShardedTensor / FSDP1 deprecation noise
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    dist.init_process_group("gloo", f"file://{tmp}/store", rank=rank, world_size=WORLD, timeout=timeout)
    torch.manual_seed(0)
    model = FSDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)),
                 sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=torch.device("cpu"))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    optim.step()
    msd, osd = get_state_dict(model, optim)
    state = {"model": msd, "optim": osd}
    res = {"type": type(msd["0.weight"]).__name__,
           "save": attempt(lambda: dcp.save(state, checkpoint_id=os.path.join(tmp, "sync"))),
           "async_save": attempt(lambda: dcp.async_save(state, checkpoint_id=os.path.join(tmp, "async")).result())}
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(res))
    # No teardown: after a rank raised inside a collective code path, destroying the group can
    # abort the process in gloo's threads ("terminate called without an active exception",
    # SIGABRT) before anything is written, and the script would say 2. Write, then leave at once.
    os._exit(0)


def main():
    print(f"torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
        deadline = time.monotonic() + TIMEOUT_S
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"ranks did not finish within {TIMEOUT_S}s")
        results = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(WORLD)]
    for r, res in enumerate(results):
        print(f"rank {r}: model['0.weight'] is {res['type']}; dcp.save: {res['save'] or 'OK'}; "
              f"dcp.async_save: {res['async_save'] or 'OK'}")
    if any(res["save"] for res in results):
        print("ERROR: control dcp.save failed too; cannot judge")
        return 2
    failed = [r for r, res in enumerate(results) if res["async_save"] and "ShardedTensor" in res["async_save"]]
    if failed:
        print(f"BUG PRESENT: dcp.async_save raised the ShardedTensor data_ptr error on ranks {failed}, "
              "while dcp.save of the same state dict works")
        return 1
    print("FIXED: dcp.async_save saved the FSDP1 sharded state dict (bug absent)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

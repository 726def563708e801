"""FSDP1 use_orig_params: a save/load round trip drops Adagrad's eager state on a rank whose shard is empty.

Bug: FSDP1 (FULL_SHARD, use_orig_params=True, each Linear of an MLP 13->24->16->7 auto-wrapped), 2 ranks.
Each Linear's FlatParameter is split in half; on rank 0 every bias lies wholly outside the local shard, so
rank 0's bias parameters are empty tensors (numel 0). torch.optim.Adagrad creates its state eagerly in
__init__ for every parameter, so rank 0 holds {step: tensor(0.), sum: tensor of shape [0]} for each bias
(step stays 0: FSDP sets .grad = None for a parameter outside the shard, so step() skips it). After
training, saving with FSDP.optim_state_dict(model, optim) under SHARDED_STATE_DICT and loading into a fresh
model + fresh Adagrad with optim.load_state_dict(FSDP.optim_state_dict_to_load(...)), rank 0 has NO state
for the three biases (optim.state[bias] is empty); every other entry, and all of rank 1, is unchanged.
Mechanism (2.13 source): _shard_orig_param_state (torch/distributed/fsdp/_optim_utils.py) returns {} when
``not shard_param_info.in_shard``, and Optimizer.load_state_dict replaces the whole state, so the fresh
optimizer's eager entries for those parameters are discarded. The save side ignores the same entries on
purpose (_convert_all_state_info skips the scalar state of ranks whose tensor state is empty): the
checkpoint records step=3 for the biases, taken from rank 1.
The same happens with FULL_STATE_DICT, and with torch.distributed.checkpoint.state_dict get_state_dict /
set_state_dict (sharded and full), and with a single param group; all are checked here.

Effect (printed): none on the numbers. Resuming (3 steps, save, load, 2 more steps) gives parameters and a
second checkpoint bitwise equal to an uninterrupted 5-step run on every rank; the lost entries carry no
information (an empty sum; a step that the checkpoint does not use), and Adagrad's step() re-creates state
lazily (_init_group), so even a non-None empty grad does not raise. One API does notice: the resumed
optimizer's Adagrad.share_memory() raises KeyError: 'sum' on rank 0 (it indexes state['sum'] for every
parameter); the uninterrupted optimizer's does not.

Correct behaviour: after the round trip each rank's optim.state has the same parameters and keys as
before the save (for Adagrad: an entry for every parameter, as __init__ made it), or FSDP documents that
state for a parameter with no local elements is not restored.

Seen on: torch 2.13.0+cpu (gloo, CPU, 2 ranks).
Upstream: not found as such. Related: https://github.com/pytorch/pytorch/pull/122522 (closed, not merged:
make Adagrad/Adadelta init lazily, which would remove the eager entries),
https://github.com/pytorch/pytorch/pull/89900 (closed via ghstack; adds _shard_orig_param_state, which is in
2.13), https://github.com/huggingface/accelerate/issues/3855 and
https://github.com/huggingface/accelerate/pull/4142 (Adagrad's eager state under FSDP2 in accelerate; a
different mechanism).

Run: python reports/findings/repro/fsdp1_orig_params_adagrad_empty_shard_state.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import datetime
import io
import json
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy, StateDictType
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

WORLD = 2
TIMEOUT_S = 240  # hang guard only; the script normally takes ~15-30 s on a shared 2-core machine
# (api, param groups); the first is the case described in the docstring
CASES = [("fsdp_sharded", 2), ("fsdp_sharded", 1), ("fsdp_full", 2), ("dsd_sharded", 2), ("dsd_full", 2)]


def build(groups):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(13, 24), nn.ReLU(), nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 7))
    model = FSDP(
        mlp,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        use_orig_params=True,
        auto_wrap_policy=ModuleWrapPolicy({nn.Linear}),
        device_id=torch.device("cpu"),
    )
    if groups == 1:
        return model, torch.optim.Adagrad(model.parameters(), lr=1e-2)
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    pgs = [{"params": weights, "weight_decay": 1e-2}, {"params": biases, "weight_decay": 0.0, "lr": 2e-2}]
    return model, torch.optim.Adagrad(pgs, lr=1e-2)


def train(model, optim, steps, start):
    for s in range(start, start + steps):
        x = torch.randn(4, 13, generator=torch.Generator().manual_seed(1000 * dist.get_rank() + s))
        model(x).pow(2).sum().backward()
        optim.step()
        optim.zero_grad()


def short(name):
    return name.replace("_fsdp_wrapped_module.", "")


def snapshot(model, optim):
    """{param name: None if no state else {key: cloned value}}."""
    out = {}
    for n, p in model.named_parameters():
        st = optim.state.get(p)
        out[short(n)] = {k: v.clone() if torch.is_tensor(v) else v for k, v in st.items()} if st else None
    return out


def describe(st):
    if st is None:
        return "no state"
    return ", ".join(
        f"{k}=" + (f"{v.item():g}" if v.dim() == 0 else f"shape{list(v.shape)}") if torch.is_tensor(v) else f"{k}={v!r}"
        for k, v in st.items()
    )


def state_diffs(a, b):
    diffs = []
    for n in a:
        x, y = a[n], b[n]
        if (x is None) != (y is None) or (x is not None and x.keys() != y.keys()):
            diffs.append({"param": n, "before": describe(x), "after": describe(y)})
        elif x is not None and any(
            not (torch.equal(x[k], y[k]) if torch.is_tensor(x[k]) else x[k] == y[k]) for k in x
        ):
            diffs.append({"param": n, "before": describe(x), "after": describe(y) + " (values differ)"})
    return diffs


def save(model, optim, api):
    buf = io.BytesIO()
    if api.startswith("fsdp"):
        sdt = StateDictType.SHARDED_STATE_DICT if api == "fsdp_sharded" else StateDictType.FULL_STATE_DICT
        with FSDP.state_dict_type(model, sdt):
            torch.save({"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optim)}, buf)
    else:
        msd, osd = get_state_dict(model, optim, options=StateDictOptions(full_state_dict=api == "dsd_full"))
        torch.save({"model": msd, "optim": osd}, buf)
    buf.seek(0)
    return buf


def load(model, optim, buf, api):
    ck = torch.load(buf, weights_only=False)
    if api.startswith("fsdp"):
        sdt = StateDictType.SHARDED_STATE_DICT if api == "fsdp_sharded" else StateDictType.FULL_STATE_DICT
        with FSDP.state_dict_type(model, sdt):
            model.load_state_dict(ck["model"])
            optim.load_state_dict(FSDP.optim_state_dict_to_load(model, optim, ck["optim"]))
    else:
        opts = StateDictOptions(full_state_dict=api == "dsd_full")
        set_state_dict(model, optim, model_state_dict=ck["model"], optim_state_dict=ck["optim"], options=opts)


def flat_osd(model, optim, api):
    """The optimizer state dict a second save would write, flattened to {fqn.key: local tensor}."""
    if api.startswith("fsdp"):
        sdt = StateDictType.SHARDED_STATE_DICT if api == "fsdp_sharded" else StateDictType.FULL_STATE_DICT
        with FSDP.state_dict_type(model, sdt):
            osd = FSDP.optim_state_dict(model, optim)
    else:
        _, osd = get_state_dict(model, optim, options=StateDictOptions(full_state_dict=api == "dsd_full"))
    out = {}
    for fqn, st in osd["state"].items():
        for k, v in st.items():
            out[f"{fqn}.{k}"] = v.local_tensor() if hasattr(v, "local_tensor") else v
    return out


def case(api, groups):
    model, optim = build(groups)
    train(model, optim, 3, 0)
    before = snapshot(model, optim)
    buf = save(model, optim, api)
    fresh, fresh_optim = build(groups)
    load(fresh, fresh_optim, buf, api)
    after = snapshot(fresh, fresh_optim)
    res = {
        "numel": {short(n): p.numel() for n, p in model.named_parameters()},
        "diffs": state_diffs(before, after),
    }
    # effect on training: 2 more steps vs. an uninterrupted 5-step run, bitwise, plus a second checkpoint
    train(fresh, fresh_optim, 2, 3)
    ref, ref_optim = build(groups)
    train(ref, ref_optim, 5, 0)
    pr, pf = dict(ref.named_parameters()), dict(fresh.named_parameters())
    res["param_mismatch"] = [short(n) for n in pr if not torch.equal(pr[n].detach(), pf[n].detach())]
    a, b = flat_osd(ref, ref_optim, api), flat_osd(fresh, fresh_optim, api)
    res["ckpt2_mismatch"] = sorted(k for k in set(a) | set(b) if k not in a or k not in b or not torch.equal(a[k], b[k]))
    share = {}
    for tag, opt in (("uninterrupted", ref_optim), ("resumed", fresh_optim)):
        try:
            opt.share_memory()
            share[tag] = "ok"
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            share[tag] = f"{type(e).__name__}: {e}"
    res["share_memory"] = share
    return res


def worker(rank, tmp):
    warnings.filterwarnings("ignore")  # ShardedTensor / FSDP1 deprecation noise
    try:
        timeout = datetime.timedelta(seconds=TIMEOUT_S)
        dist.init_process_group("gloo", f"file://{tmp}/store", rank=rank, world_size=WORLD, timeout=timeout)
        res = {f"{api}/{g}": case(api, g) for api, g in CASES}
    except Exception:
        res = {"setup_error": traceback.format_exc()}
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(res))  # written before teardown
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(worker, args=(tmp,), nprocs=WORLD, join=False, start_method="spawn")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                if ctx.join(timeout=1):
                    break
            except Exception:  # a rank died after (or before) writing its result; judged by the files below
                break
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                print(f"ERROR: ranks did not finish within {TIMEOUT_S}s")
                return 2
        files = [Path(tmp, f"rank{r}.json") for r in range(WORLD)]
        if not all(f.exists() for f in files):
            print("ERROR: a rank wrote no result (crashed before finishing)")
            return 2
        results = [json.loads(f.read_text()) for f in files]
    for r, res in enumerate(results):
        if "setup_error" in res:
            print(f"rank {r} setup failure:\n{res['setup_error']}")
            return 2
    bugs = []
    for api, g in CASES:
        key = f"{api}/{g}"
        for r, res in enumerate(results):
            c = res[key]
            empty = [n for n, k in c["numel"].items() if k == 0]
            print(f"[{key} groups] rank {r}: params with an empty local shard: {empty or 'none'}")
            for d in c["diffs"]:
                line = f"[{key} groups] rank {r}: {d['param']}: before save {{{d['before']}}}, after load {{{d['after']}}}"
                print("  " + line)
                bugs.append(line)
            print(
                f"  resume 3+2 vs uninterrupted 5: params "
                f"{'bitwise equal' if not c['param_mismatch'] else 'DIFFER: ' + str(c['param_mismatch'])}; "
                f"second checkpoint {'equal' if not c['ckpt2_mismatch'] else 'DIFFERS: ' + str(c['ckpt2_mismatch'])}; "
                f"Adagrad.share_memory() uninterrupted: {c['share_memory']['uninterrupted']}, "
                f"resumed: {c['share_memory']['resumed']}"
            )
    if bugs:
        print(f"BUG PRESENT: {len(bugs)} optimizer-state entries present before the save are missing after the load:")
        for b in bugs:
            print(f"BUG PRESENT: {b}")
        return 1
    print("FIXED: every rank's optimizer state has the same parameters and keys after the load as before the save")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

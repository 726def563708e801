"""B: DDP (gloo, CPU) resume at 4 ranks is not bitwise. Exits 1 while resuming under DDP's default
options is not bitwise at WORLD ranks (default 4), 0 otherwise. torch only.
Mechanism: DDP's first iteration uses the initial bucket layout (params in registration order,
one bucket: compute_bucket_size_limits -> [sys.maxsize]); after iteration 1 the reducer rebuilds
buckets in gradient-ready order (reversed here). A fresh DDP after resume allreduces its first step
in the initial layout; gloo's ring allreduce sums an element in an order that depends on its offset in
the flattened buffer, so at >2 ranks the reduced gradient differs in the last bits.
Also prints: option variants, bucket layouts, local/reduced gradient equality, and a direct
all_reduce of the same values at two offsets."""
import copy, os, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
WORLD = int(os.environ.get("WORLD", 4)); STEPS = 3

def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(13, 24), nn.ReLU(), nn.Linear(24, 7), nn.ReLU(), nn.Linear(7, 5))
def batch(rank, step):
    g = torch.Generator().manual_seed(1009 * rank + step)
    return torch.randn(8, 13, generator=g), torch.randn(8, 5, generator=g)

def train(rank, steps, start, options, state=None, log=None):
    model = build(); optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if state is not None:
        model.load_state_dict(state["model"]); optim.load_state_dict(state["optim"])
    ddp = DDP(model, **options)
    names = {id(p): n for n, p in model.named_parameters()}
    cur = {}
    if log is not None:
        def hook(_s, bucket):
            cur.setdefault("layout", []).append([names[id(p)] for p in bucket.parameters()])
            cur.setdefault("local", []).append(bucket.buffer().clone())
            return allreduce_hook(None, bucket)
        ddp.register_comm_hook(None, hook)
    for step in range(start, start + steps):
        x, y = batch(rank, step)
        loss = nn.functional.mse_loss(ddp(x), y)
        optim.zero_grad(); cur.clear(); loss.backward()
        if log is not None:
            log[step] = dict(layout=cur["layout"], local=cur["local"],
                             grads={n: p.grad.clone() for n, p in model.named_parameters()})
        optim.step()
    return model, optim

def flat(model, optim):
    out = [p.detach() for p in model.parameters()]
    for s in optim.state_dict()["state"].values():
        out += [v for v in s.values() if torch.is_tensor(v)]
    return out

def resume(rank, options, log_whole=None, log_res=None):
    whole = flat(*train(rank, 2 * STEPS, 0, options, log=log_whole))
    m, o = train(rank, STEPS, 0, options)
    saved = copy.deepcopy({"model": m.state_dict(), "optim": o.state_dict()})
    res = flat(*train(rank, STEPS, STEPS, options, saved, log=log_res))
    return all(torch.equal(a, b) for a, b in zip(whole, res, strict=True))

VARIANTS = {
    "default": {},
    "find_unused_parameters=True": {"find_unused_parameters": True},
    "static_graph=True": {"static_graph": True},
    "gradient_as_bucket_view=True": {"gradient_as_bucket_view": True},
    "bucket_cap_mb_list=[25]": {"bucket_cap_mb_list": [25]},
    "bucket_cap_mb_list=[1e-4] (buckets regroup)": {"bucket_cap_mb_list": [1e-4]},
    "bucket_cap_mb_list=[1e-5] (1 param/bucket)": {"bucket_cap_mb_list": [1e-5]},
}

def worker(rank, store, results):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        r = {k: resume(rank, v) for k, v in VARIANTS.items()}
        lw, lr = {}, {}
        resume(rank, {}, lw, lr)
        s = STEPS
        r["layout_whole_step3"] = lw[s]["layout"]; r["layout_resumed_step3"] = lr[s]["layout"]
        r["layout_whole_step0"] = lw[0]["layout"]
        # local (pre-allreduce) gradients, compared by parameter
        def per_param(log):
            d = {}
            for lay, buf in zip(log["layout"], log["local"]):
                off = 0
                for n in lay:
                    numel = log["grads"][n].numel(); d[n] = buf[off:off + numel].clone(); off += numel
            return d
        a, b = per_param(lw[s]), per_param(lr[s])
        r["local_grad_equal"] = all(torch.equal(a[n], b[n]) for n in a)
        r["reduced_grad_equal"] = {n: torch.equal(lw[s]["grads"][n], lr[s]["grads"][n]) for n in lw[s]["grads"]}
        # direct: allreduce the same per-rank values flattened in two orders
        g = torch.Generator().manual_seed(rank)
        parts = [torch.randn(n, generator=g) for n in (312, 24, 168, 7, 35, 5)]
        v1 = torch.cat(parts); v2 = torch.cat(parts[::-1])
        dist.all_reduce(v1); dist.all_reduce(v2)
        back = torch.cat(list(torch.split(v2, [5, 35, 7, 168, 24, 312]))[::-1])
        r["direct_diff_elems"] = int((v1 != back).sum())
        # position dependence: same vector rolled by k
        v = torch.randn(551, generator=g); diffs = {}
        for k in (1, 100, 138):
            a1 = v.clone(); a2 = torch.roll(v, k)
            dist.all_reduce(a1); dist.all_reduce(a2)
            diffs[k] = int((a1 != torch.roll(a2, -k)).sum())
        r["roll_diff_elems"] = diffs
        results[rank] = r
    finally:
        try: dist.destroy_process_group()
        except Exception: pass

if __name__ == "__main__":
    import warnings; warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        results = mp.Manager().dict()
        mp.spawn(worker, args=(os.path.join(tmp, "store"), results), nprocs=WORLD, join=True)
        r0 = results[0]
        for k in VARIANTS: print(f"{k:45s} resume bitwise on all ranks: {all(results[i][k] for i in range(WORLD))}")
        for k in ("layout_whole_step0", "layout_whole_step3", "layout_resumed_step3", "local_grad_equal", "reduced_grad_equal", "direct_diff_elems", "roll_diff_elems"):
            print(k, r0[k])
    ok = all(results[i]["default"] for i in range(WORLD))
    print(f"torch {torch.__version__}, gloo, {WORLD} ranks: resume bitwise with default DDP options: {ok}")
    sys.exit(0 if ok else 1)

"""A: FSDP2 fully_shard with MixedPrecisionPolicy(param_dtype=bf16) on a model with BatchNorm1d
fails on CPU: the first forward raises "expected scalar type BFloat16 but found Float" in
F.batch_norm (BN's affine weight/bias are cast to bf16, its running_mean/var buffers stay fp32,
and the CPU batch_norm kernel requires weight/bias and running stats to share one dtype).
Exits 1 while the failure is present (at WORLD ranks, default 1), 0 otherwise. torch only.
Also prints: the 2-rank result, FSDP1 (auto-wrapped, default _module_classes_to_ignore), FSDP1
wrapped at the root only, and the workaround (BatchNorm as its own fully_shard unit with
param_dtype=float32)."""
import os, sys, tempfile, traceback
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch import nn

WORLD = int(os.environ.get("WORLD", 1))
BF16 = torch.bfloat16


def build():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(13, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 5))
    m[0].requires_grad_(False)
    return m


def step(model, rank):
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(8, 13, generator=g), torch.randn(8, 5, generator=g)
    out = model(x)
    nn.functional.mse_loss(out.float(), y).backward()


def fsdp2(bn_fp32_unit):
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    pol = MixedPrecisionPolicy(param_dtype=BF16, reduce_dtype=torch.float32)
    m = build()
    if bn_fp32_unit == "fp32":  # per-module policy: BN params fp32, inputs cast to fp32
        fully_shard(m[1], mesh=mesh, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32))
    elif bn_fp32_unit == "upstream":  # upstream test_fully_shard_mixed_precision._test_norm_modules
        fully_shard(m[1], mesh=mesh, mp_policy=MixedPrecisionPolicy(output_dtype=BF16))
    elif bn_fp32_unit == "cast_buffers":  # upstream test's other option: buffers cast down to bf16
        m[1].running_mean = m[1].running_mean.to(BF16); m[1].running_var = m[1].running_var.to(BF16)
    for mod in m:
        if isinstance(mod, nn.Linear):
            fully_shard(mod, mesh=mesh, mp_policy=pol)
    fully_shard(m, mesh=mesh, mp_policy=pol)
    return m


def fsdp1(auto_wrap: bool):  # root only needs use_orig_params=True (frozen + trainable in one flat param)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    mpc = MixedPrecision(param_dtype=BF16, reduce_dtype=BF16)
    kw = {"auto_wrap_policy": ModuleWrapPolicy({nn.Linear})} if auto_wrap else {"use_orig_params": True}
    return FSDP(build(), mixed_precision=mpc, device_id=torch.device("cpu"), **kw)


CASES = {
    "fsdp2 bf16 (Linear units + root)": lambda: fsdp2(None),
    "fsdp2 bf16 + BatchNorm own unit param_dtype=fp32": lambda: fsdp2("fp32"),
    "fsdp2 bf16 + BatchNorm own unit output_dtype=bf16": lambda: fsdp2("upstream"),
    "fsdp2 bf16 + BN buffers cast to bf16": lambda: fsdp2("cast_buffers"),
    "fsdp1 bf16 auto_wrap ModuleWrapPolicy({Linear})": lambda: fsdp1(True),
    "fsdp1 bf16 root only, use_orig_params=True": lambda: fsdp1(False),
}


def worker(rank, store, results):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        r = {}
        for name, make in CASES.items():
            try:
                model = make()
                step(model, rank)
                r[name] = "ok"
            except Exception as e:  # noqa: BLE001
                tb = traceback.extract_tb(e.__traceback__)[-1]
                r[name] = f"{type(e).__name__}: {str(e).splitlines()[0]}  [at {os.path.basename(tb.filename)}:{tb.lineno} {tb.name}]"
        results[rank] = r
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def kernel_matrix():
    """The CPU batch_norm kernel alone (training mode), no FSDP: which dtype mixes it accepts."""
    x = torch.randn(8, 16)
    out = {}
    for w_dt, rs_dt, x_dt in [(BF16, torch.float32, BF16), (torch.float32, torch.float32, BF16),
                              (BF16, BF16, BF16), (BF16, None, BF16)]:
        w, b = torch.ones(16, dtype=w_dt), torch.zeros(16, dtype=w_dt)
        rm = rv = None
        if rs_dt is not None:
            rm, rv = torch.zeros(16, dtype=rs_dt), torch.ones(16, dtype=rs_dt)
        try:
            nn.functional.batch_norm(x.to(x_dt), rm, rv, w, b, training=True)
            res = "ok"
        except RuntimeError as e:
            res = "RuntimeError: " + str(e).splitlines()[0]
        out[f"input {x_dt}, weight/bias {w_dt}, running stats {rs_dt}"] = res
    return out


if __name__ == "__main__":
    import warnings; warnings.filterwarnings("ignore")
    for k, v in kernel_matrix().items():
        print(f"  kernel: {k:75s} {v}")
    with tempfile.TemporaryDirectory() as tmp:
        results = mp.Manager().dict()
        mp.spawn(worker, args=(os.path.join(tmp, "store"), results), nprocs=WORLD, join=True)
        r0 = dict(results[0])
    print(f"torch {torch.__version__}, gloo/CPU, {WORLD} rank(s)")
    for k, v in r0.items():
        print(f"  {k:50s} {v}")
    bad = "expected scalar type BFloat16 but found Float" in r0["fsdp2 bf16 (Linear units + root)"]
    sys.exit(1 if bad else 0)

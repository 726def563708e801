"""Shared problem definition: axes, constraint clauses, valid()/valid_partial().

Every constraint here happens to involve exactly two axes, so it is written as a
list of CLAUSES (keys, predicate).  valid(row) needs a full row; valid_partial(row)
evaluates only clauses whose keys are all present (what generators that build
rows incrementally need: allpairspy filter, covertable 'fn' constraints).
"""

from collections import OrderedDict

AXES = OrderedDict(
    [
        (
            "layout",
            [
                "ddp",
                "fsdp1_full_shard",
                "fsdp1_shard_grad_op",
                "fsdp1_no_shard",
                "fsdp1_hybrid_shard",
                "fsdp1orig_full_shard",
                "fsdp1orig_no_shard",
                "fsdp2_shard",
                "fsdp2_hsdp",
                "fsdp2noreshard_shard",
                "fsdp2_tp",
                "tp",
                "fsdp2ac",
                "fsdp2compile",
                "fsdp2offload",
                "pp_stages",
                "pp_fsdp",
                "fsdp2_ep",
                "plain",
                "fsdp1orig_hybrid_shard",
            ],
        ),
        (
            "api",
            [
                "sd_full",
                "sd_full_rank0",
                "sd_sharded",
                "sd_local",
                "legacy_full_scatter",
                "legacy_sharded",
                "dsd_full",
                "dsd_sharded",
                "dsd_full_bcast",
                "dsd_sharded_offload",
                "dsd_full_flat",
                "dsd_sharded_flat",
            ],
        ),
        (
            "storage",
            [
                "torch_save",
                "torch_save_per_rank",
                "dcp",
                "dcp_async",
                "dcp_to_torch_save",
                "torch_save_to_dcp",
                "hf_safetensors",
                "dcp_async_busy",
            ],
        ),
        ("optimizer", ["sgd", "adam", "adamw", "adafactor", "nadam", "rmsprop"]),
        ("param_groups", ["one", "two"]),
        ("scheduler", ["none", "steplr", "onecycle"]),
        (
            "model",
            [
                "mlp",
                "tied_transformer",
                "bn_frozen",
                "frozen_idle",
                "mlp_nonpersistent",
                "mlp_scalar",
                "llama",
                "moe",
            ],
        ),
        ("precision", ["fp32", "bf16"]),
        ("world_size", ["1", "2", "4"]),
    ]
)
NAMES = list(AXES)
TRIPLE = ("layout", "api", "storage")  # axes that get strength 3 in the mixed run

SHARDED_OR_LOCAL_API = {
    "sd_sharded",
    "sd_local",
    "legacy_sharded",
    "dsd_sharded",
    "dsd_sharded_offload",
    "dsd_sharded_flat",
}
MOE_LAYOUTS = {"fsdp2_ep", "fsdp1_full_shard", "fsdp2_shard"}


def _api_layout(r):
    a, l = r["api"], r["layout"]
    if a.startswith(("sd_", "legacy_")):
        if not (l.startswith("fsdp1") or (a == "sd_full" and l in ("ddp", "plain"))):
            return False
    if a in ("dsd_full_flat", "dsd_sharded_flat") and not l.startswith("pp_"):
        return False
    return not (l == "plain" and a != "sd_full")


def _layout_ws(r):
    l, w = r["layout"], r["world_size"]
    if ("hsdp" in l or "hybrid" in l) and w != "4":
        return False
    if l == "fsdp2_ep" and w not in ("2", "4"):
        return False
    if l == "pp_fsdp" and w != "4":
        return False
    return not (l == "pp_stages" and w != "2")


def _layout_model(r):
    l, m = r["layout"], r["model"]
    if l == "fsdp2_ep" and m != "moe":
        return False
    if m == "moe" and l not in MOE_LAYOUTS:
        return False
    return not (l in ("fsdp2_tp", "tp") and m not in ("mlp", "llama"))


CLAUSES = [
    (("api", "layout"), _api_layout),
    (("storage", "api"), lambda r: not (r["storage"] == "torch_save" and r["api"] in SHARDED_OR_LOCAL_API)),
    (("storage", "layout"), lambda r: not (r["storage"] == "torch_save" and r["layout"].startswith("pp_"))),
    (("storage", "model"), lambda r: not (r["storage"] == "torch_save" and r["model"] == "moe")),
    (("layout", "world_size"), _layout_ws),
    (("layout", "model"), _layout_model),
    (
        ("layout", "param_groups"),
        lambda r: not (r["param_groups"] == "two" and r["layout"].startswith("fsdp1_")),
    ),
    (("layout", "precision"), lambda r: not (r["precision"] == "bf16" and r["layout"] in ("ddp", "plain"))),
]


def valid(row):
    """Full-row predicate (row: dict axis->value)."""
    return all(fn(row) for _, fn in CLAUSES)


def valid_partial(row):
    """Predicate on a partial row: only clauses whose axes are all present."""
    return all(fn(row) for keys, fn in CLAUSES if all(k in row for k in keys))


# Rows we'd like to force into every generated matrix (the 'seed rows' test).
SEED_ROWS = [
    dict(
        layout="fsdp2_shard",
        api="dsd_sharded",
        storage="dcp",
        optimizer="adamw",
        param_groups="two",
        scheduler="onecycle",
        model="llama",
        precision="bf16",
        world_size="4",
    ),
    dict(
        layout="ddp",
        api="sd_full",
        storage="torch_save",
        optimizer="sgd",
        param_groups="one",
        scheduler="none",
        model="mlp",
        precision="fp32",
        world_size="2",
    ),
]
assert all(valid(r) for r in SEED_ROWS)

"""Rank-0 init through set_model_state_dict(broadcast_from_rank0=True), as StateDictOptions
documents it and Accelerate's cpu_ram_efficient_loading uses it: rank 0 builds the model by its
constructor, rank 1 on the meta device; both fully_shard; rank 0 passes the full state dict, rank 1
{}. A non-persistent buffer computed in __init__ (a rotary cache's inv_freq) is in no state dict,
so the broadcast never touches it: on rank 1 it stays on the meta device (the recipe as written),
or, where the rank gave the model storage first (to_empty, as the FSDP2 docs do before a load),
it holds uninitialised memory. Only the model's own initialisation (reset_parameters /
init_weights) computes it, which the recipe does not mention.

torch only, gloo on CPU, 2 processes. Exits 1 when rank 1's buffer is not the constructor's in
either variant (the limitation is present), 0 when both hold it."""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import fully_shard


class Rotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer(
            "inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)), persistent=False
        )


def run(rank: int, world: int, store_dir: str, out_dir: str) -> None:
    store = dist.FileStore(os.path.join(store_dir, "store"), world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(0)
    expected = Rotary().inv_freq.clone()
    full_sd = Rotary().state_dict() if rank == 0 else {}
    lines = []
    for variant in ("meta, as written", "to_empty first"):
        if rank == 0:
            model = Rotary()
        else:
            with torch.device("meta"):
                model = Rotary()
        fully_shard(model)
        if rank != 0 and variant == "to_empty first":
            model.to_empty(device="cpu")
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, dict(full_sd), options=options)  # it writes into the dict it gets
        buf = model.inv_freq
        ok = (not buf.is_meta) and torch.equal(buf, expected)
        shown = "meta" if buf.is_meta else buf.tolist()
        lines.append(
            f"rank {rank} [{variant}]: inv_freq {'ok' if ok else 'WRONG'}: {shown} (expected {expected.tolist()})"
        )
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    print("torch", torch.__version__)
    with tempfile.TemporaryDirectory() as store_dir, tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(run, args=(2, store_dir, out_dir), nprocs=2, join=True, start_method="spawn")
        text = "".join(open(os.path.join(out_dir, f"rank{r}.txt")).read() for r in range(2))
    print(text, end="")
    present = "WRONG" in text
    print(
        "present: a rank-0 init through broadcast_from_rank0 leaves the non-zero ranks' non-persistent buffer "
        "uninitialised"
        if present
        else "absent: every rank holds the constructor's buffer"
    )
    return 1 if present else 0


if __name__ == "__main__":
    sys.exit(main())

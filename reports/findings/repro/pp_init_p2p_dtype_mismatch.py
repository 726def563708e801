"""torch 2.9's pipeline schedules abort on gloo at their first step: the neighbour handshake sends an
int64 scalar into a float32 buffer of one element.

Bug: PR #160210 ("[PP] Initialize P2P communicators on first step", in torch 2.9) made every
pipeline schedule exchange a dummy tensor with each neighbouring stage before its first step
(_PipelineStageBase._get_init_p2p_neighbors_ops, called from _initialize_stage and, for multi-stage
schedules, _initialize_stages). In 2.9.x it receives into ``torch.zeros(1)`` (float32, 4 bytes)
and sends ``torch.tensor(self.stage_index)`` (int64, 8 bytes). gloo checks the size it receives and
aborts the process: "op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match
expected size" (gloo::EnforceNotMet, SIGABRT). So any pipeline of two stages on gloo dies at its
first schedule.step(), whatever the model, the input or whether the stage shapes are given.

Fixed by PR #165539 ("Use same dtype for receive and send tensor when initializing p2p
communication", for issue #165143), in torch 2.10.0: both tensors float32. Not backported to 2.9.

Here: 2 gloo ranks on the CPU, stage 0 an embedding + linear taking int64 tokens, stage 1 linear +
head, PipelineStage without input_args, ScheduleGPipe(n_microbatches=2, loss_fn), one step.
Control: the same with the handshake's tensors patched to float32 on both sides must pass (it shows
the handshake is the cause, and that the setup works).

Run: python reports/findings/repro/pp_init_p2p_dtype_mismatch.py
Exit 1 + "BUG PRESENT:" if a rank dies or hangs (120 s), 0 + "FIXED:" if the step completes on both
ranks, 2 + "SETUP FAILED" if the patched control does not complete.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import sys
import time
import traceback
from datetime import timedelta

BATCH, SEQ, VOCAB, WIDTH = 4, 8, 16, 16
WORLD = 2
TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, patch: bool) -> None:
    """One rank: exit 0 once its step completed, 1 on a Python error; gloo's abort kills it."""
    try:
        import torch
        import torch.distributed as dist
        from torch import nn
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        torch.manual_seed(0)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=WORLD,
            timeout=timedelta(seconds=60),
        )
        if patch:
            from torch.distributed.pipelining import stage as stage_module

            original = stage_module._PipelineStageBase._get_init_p2p_neighbors_ops

            def same_dtype(self):  # type: ignore[no-untyped-def]
                ops = original(self)
                for op in ops:
                    op.tensor = op.tensor.to(torch.float32).reshape(1)
                return ops

            stage_module._PipelineStageBase._get_init_p2p_neighbors_ops = same_dtype
        if rank == 0:
            module = nn.Sequential(nn.Embedding(VOCAB, WIDTH), nn.Linear(WIDTH, WIDTH), nn.Tanh())
        else:
            module = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, VOCAB))

        def loss_fn(out, target):  # type: ignore[no-untyped-def]
            return nn.functional.cross_entropy(out.reshape(-1, VOCAB), target.reshape(-1))

        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        target = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        schedule = ScheduleGPipe(
            PipelineStage(module, rank, WORLD, torch.device("cpu")), n_microbatches=2, loss_fn=loss_fn
        )
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=target, losses=[])
        dist.barrier()
        dist.destroy_process_group()
        sys.stdout.flush()
        os._exit(0)
    except BaseException:  # any Python-level failure of the step: exit 1
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def run(patch: bool) -> list[int | None]:
    """The ranks' exit codes (None: still running at the deadline, then killed)."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, patch), daemon=True) for r in range(WORLD)]
    for p in procs:
        p.start()
    deadline, first_death = time.monotonic() + TIMEOUT_S, None
    while any(p.exitcode is None for p in procs):
        if first_death is None and any(p.exitcode not in (None, 0) for p in procs):
            first_death = time.monotonic()
        now = time.monotonic()
        if now > deadline or (first_death is not None and now - first_death > 5):
            break  # one rank died: the others would wait for it
        time.sleep(0.2)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            p.kill()
        p.join(10)
    return codes


def main() -> int:
    import torch

    print(f"torch {torch.__version__}", flush=True)
    control = run(patch=True)
    if control != [0] * WORLD:
        print(
            f"SETUP FAILED: the control (handshake tensors of one dtype) did not complete: exit codes {control}"
        )
        return 2
    print("control: with the handshake's send and receive tensors both float32, the step completes")
    codes = run(patch=False)
    if codes != [0] * WORLD:
        print(
            f"BUG PRESENT: the first ScheduleGPipe step on gloo did not complete (rank exit codes {codes}; "
            "-6: SIGABRT, gloo's 'op.preamble.length <= op.nbytes. 8 vs 4', None: hung)"
        )
        return 1
    print("FIXED: the first ScheduleGPipe step completes on both ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())

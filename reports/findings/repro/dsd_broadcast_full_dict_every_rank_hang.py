"""set_model_state_dict(broadcast_from_rank0=True) raises on rank 1 only when a model whose parameter names
carry a wrapper prefix (a block compiled by torch.compile: "_orig_mod."; DDP: "module.") meets a full state
dict on every rank; rank 0 returns and then waits forever in its next collective.

Bug: FSDP2 (fully_shard) model, one block wrapped by torch.compile before fully_shard, so its parameter
names carry `_orig_mod.` ("2._orig_mod.weight"); get_model_state_dict strips that prefix ("2.weight").
Calling
    set_model_state_dict(model, full_sd,
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
with the full state dict on EVERY rank (instead of {} on the non-zero ranks) makes rank 1 raise
    RuntimeError: Error(s) in loading state_dict for FSDPSequential:
        Unexpected key(s) in state_dict: "2.weight", "2.bias".
from model.load_state_dict (called at torch/distributed/checkpoint/state_dict.py, _load_model_state_dict,
`_state_dict_fn(model, "load_state_dict")(...)`, line 623 on 2.13.0). Cause: _load_model_state_dict renames
the caller's keys fqn -> fqn_with_prefix ("2.weight" -> "2._orig_mod.weight") only when
`not info.broadcast_from_rank0 or dist.get_rank() == 0`; on rank 1 the un-prefixed keys of the caller's
dict stay, `state_dict.update(local_state_dict)` adds the prefixed (broadcast) ones next to them, and the
strict load rejects the leftovers. Rank 0 renamed its keys, so its load succeeds and set_model_state_dict
returns on rank 0; the two ranks have then diverged: rank 0 enters its next collective (here a
dist.barrier(); in a model+optimizer load, set_optimizer_state_dict -> _load_optim_state_dict ->
_broadcast_state_dict -> dist.broadcast_object_list) and waits there for a rank that will never come.
With the raising rank still alive (a harness or a trainer that catches the error) rank 0 hangs until the
process-group timeout; if the raising rank's process exits instead, gloo raises "Connection closed by
peer" on rank 0 (--on-error exit).

The docstring of StateDictOptions.broadcast_from_rank0 says only that "rank0 should receive a full
state_dict and will broadcast the tensors ... Other ranks will receive the tensors and shard according
to the local shards in the model"; it does not say what the other ranks must pass. Without torch.compile
and DDP the same full-dict-on-every-rank call works (the keys need no renaming); DDP's "module." prefix
fails as compile's does; with {} on the non-zero ranks (the usual recipe) every variant works.

Variants (every one: 2 gloo CPU ranks, fully_shard per block + root, the full state dict taken with
get_model_state_dict(full_state_dict=True, cpu_offload=True) -- which returns {} on rank 1, so rank 0's
dict is shipped to rank 1 with broadcast_object_list for the "every rank" variants -- parameters zeroed,
then set_model_state_dict(full_state_dict=True, broadcast_from_rank0=True), then each rank compares its
local shards with the saved values and enters a dist.barrier(); with --next optim it first calls
set_optimizer_state_dict(model, optim, full optimizer state on rank 0 / {} on rank 1, same options), the
collective a model+optimizer load enters next):
    compiled_full_every_rank   the reported case (decides the exit code)
    ddp_full_every_rank        DDP instead of FSDP2 (names "module.fc..."), full dict on every rank: the same
    ddp_empty_nonzero          DDP, {} on rank 1
    plain_full_every_rank      no torch.compile, full dict on every rank
    compiled_empty_nonzero     torch.compile, {} on rank 1 (the usual recipe, upstream's broadcast test's)
    plain_empty_nonzero        no torch.compile, {} on rank 1 (control)

Correct behaviour: every rank returns from set_model_state_dict, its shards equal the saved values, and
every rank passes the barrier.

Seen on: torch 2.13.0+cpu and 2.15.0 (gloo, CPU, 2 ranks).
Run: python reports/findings/repro/dsd_broadcast_full_dict_every_rank_hang.py [--variant NAME|all]
     (by default the reported case and the control; `--variant all` runs the table above)
     [--timeout S] [--on-error stay|exit] [--next barrier|optim]
Exit 1 + "BUG PRESENT:" when the reported variant shows the bug (a rank raises, a rank does not finish,
or a loaded value differs), 0 + "FIXED:" when every rank completes with the saved values, 2 only when the
script could not run the check at all (the control variant failing, a worker dying before the load). A
hang or a crash in teardown never gives 2: the parent kills its ranks on timeout (after asking them for a
stack dump with SIGUSR1) and the ranks leave with os._exit, never through destroy_process_group.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORLD = 2
VARIANTS = {  # name: (compile a block, full dict on every rank); "ddp_": DDP instead of FSDP2
    "compiled_full_every_rank": (True, True),
    "ddp_full_every_rank": (False, True),
    "ddp_empty_nonzero": (False, False),
    "plain_full_every_rank": (False, True),
    "compiled_empty_nonzero": (True, False),
    "plain_empty_nonzero": (False, False),
}
MAIN, CONTROL = "compiled_full_every_rank", "plain_empty_nonzero"
DEFAULT_TIMEOUT_S = 90  # per variant; a pass takes ~10-25 s on a loaded 2-core host
HANG_GRACE_S = 12  # a rank still in a collective this long after its peer gave up is called hung
PG_TIMEOUT_S = 900  # well past the parent's timeout, so gloo never turns the hang into an error itself


# --------------------------------------------------------------------------------------------- worker


def worker(variant, rank, out_dir, on_error, next_op):  # one rank; reports through out_dir/rank{r}.json
    status = {"rank": rank, "phase": "start", "events": []}
    path = Path(out_dir, f"rank{rank}.json")

    def report(phase, **kw):
        status["phase"] = phase
        status["events"].append(phase)
        status.update(kw)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status))
        os.replace(tmp, path)

    try:  # die with the parent (Linux), so a killed parent leaves no hung rank behind
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    import faulthandler

    stacks = open(Path(out_dir, f"rank{rank}.stack"), "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)

    import datetime
    import traceback
    import warnings

    warnings.filterwarnings("ignore")
    try:
        import torch
        import torch.distributed as dist
        from torch import nn
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )
        from torch.distributed.fsdp import fully_shard

        compiled, full_every_rank = VARIANTS[variant]
        dist.init_process_group(
            "gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S)
        )
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
        if compiled:  # nothing is run through it, so nothing is actually compiled
            model[2] = torch.compile(model[2], backend="eager")
        ddp = variant.startswith("ddp_")
        if ddp:  # DDP: its parameter names carry the "module." prefix, as compile's carry "_orig_mod."
            model = nn.parallel.DistributedDataParallel(model)
        else:
            fully_shard(model[0])
            fully_shard(model[2])
            fully_shard(model)
        names = [n for n, _ in model.named_parameters()]
        save_opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        if next_op == "optim":  # an optimizer with state, loaded after the model the documented way
            optim = torch.optim.Adam(model.parameters(), lr=0.1)
            for p in model.parameters():
                p.grad = torch.ones_like(p)
            optim.step()
            optim_saved = get_optimizer_state_dict(model, optim, options=save_opts)  # {} on rank 1
        saved = get_model_state_dict(model, options=save_opts)
        got_keys = sorted(saved)  # {} on rank 1 (cpu_offload + full_state_dict: rank 0 only)
        box = [saved if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)  # rank 0's full dict, for the reference and "every rank"
        reference = {k: v.clone() for k, v in box[0].items()}
        to_load = {k: v.clone() for k, v in box[0].items()} if (rank == 0 or full_every_rank) else {}
        with torch.no_grad():  # forget the values, so the load has something to restore
            for p in model.parameters():
                (p if ddp else p.to_local()).zero_()
        report(
            "loading",
            param_names=names,
            get_model_state_dict_keys=got_keys,
            passed_keys=sorted(to_load),
        )
    except BaseException as e:
        report("setup_error", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc())
        os._exit(3)

    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    try:
        result = set_model_state_dict(model, to_load, options=opts)
    except Exception as e:
        frames = traceback.extract_tb(e.__traceback__)
        dsd = [f for f in frames if f.filename.endswith(os.path.join("checkpoint", "state_dict.py"))]
        where = dsd[-1] if dsd else frames[-1]
        report(
            "raised",
            error=f"{type(e).__name__}: {e}",
            raised_at=f"{where.filename}:{where.lineno} in {where.name}: {where.line}",
            innermost=f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}",
        )
        if on_error == "exit":  # like an uncaught exception: the process goes away
            os._exit(1)
        while True:  # like a harness/trainer that caught it: alive, but in no further collective
            time.sleep(1)
    report("loaded", load_result=str(result))

    mismatched = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            key = name.replace("_orig_mod.", "").removeprefix("module.")
            if ddp:  # every rank holds the whole tensor
                expected, local = reference[key], p
            else:
                expected, local = torch.chunk(reference[key], WORLD, dim=0)[rank], p.to_local()  # Shard(0) rows
            if not torch.equal(local.cpu(), expected):
                mismatched.append(name)
    report("verified", mismatched=mismatched)
    report("in_next_collective")
    try:
        if next_op == "optim":  # {} on rank 1, as documented, whatever the model variant passed
            set_optimizer_state_dict(model, optim, optim_saved if rank == 0 else {}, options=opts)
        dist.barrier()  # the program's next collective (set_optimizer_state_dict, a train step, ...)
    except Exception as e:
        report("next_collective_raised", error=f"{type(e).__name__}: {e}"[:400])
        os._exit(1)
    report("done")
    os._exit(0)  # no destroy_process_group: teardown after a diverged collective can abort gloo


# --------------------------------------------------------------------------------------------- parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read(out_dir, rank):
    try:
        return json.loads(Path(out_dir, f"rank{rank}.json").read_text())
    except (OSError, ValueError):
        return {"rank": rank, "phase": "no report", "events": []}


def innermost_frames(out_dir, rank, n=10):
    """The last n frames of rank's main-thread stack (faulthandler prints innermost first)."""
    try:
        text = Path(out_dir, f"rank{rank}.stack").read_text()
    except OSError:
        return []
    blocks = [b for b in text.split("\n\n") if "most recent call first" in b]
    for block in blocks:
        lines = [ln.strip() for ln in block.splitlines()[1:] if ln.strip().startswith("File")]
        if any("worker" in ln or "<module>" in ln for ln in lines):  # the main thread
            return lines[:n]
    return []


def run_variant(variant, timeout_s, on_error, next_op):
    """Runs one variant on WORLD fresh processes; returns (verdict, per-rank dicts)."""
    procs = []
    with tempfile.TemporaryDirectory(prefix="dsd_bcast_") as out_dir:
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(WORLD))
        env.setdefault("OMP_NUM_THREADS", "1")
        for rank in range(WORLD):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", variant, str(rank), out_dir, on_error, next_op]
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=dict(env, RANK=str(rank)),
                    stdout=open(Path(out_dir, f"rank{rank}.log"), "w"),
                    stderr=subprocess.STDOUT,
                )
            )
        start = time.monotonic()
        gave_up_at = None  # when some rank reached a final state while another was still busy
        final = {"raised", "done", "setup_error", "next_collective_raised"}
        hung = False
        try:
            while True:
                states = [read(out_dir, r) for r in range(WORLD)]
                alive = [p.poll() is None for p in procs]
                busy = [alive[r] and states[r]["phase"] not in final for r in range(WORLD)]
                if not any(busy):
                    break
                if gave_up_at is None and any(s["phase"] in final for s in states):
                    gave_up_at = time.monotonic()
                now = time.monotonic()
                if now - start > timeout_s or (gave_up_at is not None and now - gave_up_at > HANG_GRACE_S):
                    hung = True
                    break
                time.sleep(0.5)
            if hung:
                for r, p in enumerate(procs):
                    if busy[r]:
                        try:
                            p.send_signal(signal.SIGUSR1)  # faulthandler: dump where it waits
                        except OSError:
                            pass
                time.sleep(1.5)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        states = [read(out_dir, r) for r in range(WORLD)]
        for r in range(WORLD):
            states[r]["returncode"] = procs[r].returncode
            states[r]["hung"] = hung and busy[r]
            if states[r]["hung"]:
                states[r]["stack"] = innermost_frames(out_dir, r)
            if states[r]["phase"] in ("setup_error", "no report"):
                try:
                    states[r]["log_tail"] = Path(out_dir, f"rank{r}.log").read_text()[-1500:]
                except OSError:
                    pass
    if any(s["phase"] in ("setup_error", "no report") for s in states):
        verdict = "SETUP FAILED"
    elif all(s["phase"] == "done" and not s.get("mismatched") for s in states):
        verdict = "PASS"
    else:
        verdict = "FAIL"
    return verdict, states


def describe(state):
    r, ph = state["rank"], state["phase"]
    if ph == "raised":
        return f"rank {r}: set_model_state_dict RAISED {state['error']!r}\n      at {state['raised_at']}"
    if state.get("hung"):
        where = state.get("stack") or ["(no stack dump)"]
        what = {
            "in_next_collective": "returned from set_model_state_dict (values ok)"
            if not state.get("mismatched")
            else f"returned, WRONG values {state['mismatched']}",
            "loading": "never returned from set_model_state_dict",
        }.get(ph, f"stuck after phase {ph!r}")
        return f"rank {r}: {what}; HUNG in its next collective (killed); innermost frames:\n        " + (
            "\n        ".join(where)
        )
    if ph == "next_collective_raised":
        return f"rank {r}: returned from set_model_state_dict; its next collective raised {state['error']!r}"
    if ph == "done":
        bad = state.get("mismatched")
        return f"rank {r}: completed; " + (f"WRONG values in {bad}" if bad else "loaded values equal the saved ones")
    return f"rank {r}: {ph} {state.get('error', '')} {state.get('log_tail', '')}"


def main(argv):
    variant, timeout_s, on_error, next_op = "", DEFAULT_TIMEOUT_S, "stay", "barrier"
    args = list(argv)
    while args:  # no argparse: a usage error must not exit 2
        a = args.pop(0)
        if a == "--variant" and args:
            variant = args.pop(0)
        elif a == "--timeout" and args:
            timeout_s = float(args.pop(0))
        elif a == "--on-error" and args and args[0] in ("stay", "exit"):
            on_error = args.pop(0)
        elif a == "--next" and args and args[0] in ("barrier", "optim"):
            next_op = args.pop(0)
        else:
            print(f"ignoring unknown argument {a!r}")
    # by default the reported case and the control (what the exit code rests on); --variant all: the table
    names = [MAIN, CONTROL] if not variant else list(VARIANTS) if variant == "all" else [variant]
    if any(n not in VARIANTS for n in names):
        print(f"unknown variant {variant!r}; choose from {list(VARIANTS)} or all")
        return 2
    import torch

    print(f"torch {torch.__version__}, {WORLD} gloo CPU ranks, on-error={on_error}, next={next_op}, timeout {timeout_s:.0f}s/variant")
    verdicts = {}
    for name in names:
        t0 = time.monotonic()
        verdict, states = run_variant(name, timeout_s, on_error, next_op)
        verdicts[name] = verdict
        compiled, every = VARIANTS[name]
        print(f"\n== {name} (torch.compile={compiled}, full dict on rank 1={every}): {verdict} "
              f"[{time.monotonic() - t0:.1f}s]")
        s0 = states[0]
        if "param_names" in s0:
            print(f"   parameter names: {s0['param_names']}")
            print(f"   get_model_state_dict keys: rank0 {s0['get_model_state_dict_keys']}, "
                  f"rank1 {states[1].get('get_model_state_dict_keys')}")
            print(f"   passed to set_model_state_dict: rank0 {len(s0['passed_keys'])} keys, "
                  f"rank1 {len(states[1].get('passed_keys', []))} keys")
        for s in states:
            print("   " + describe(s))
    print()
    print("summary: " + ", ".join(f"{n}={v}" for n, v in verdicts.items()))
    if CONTROL in verdicts and verdicts[CONTROL] != "PASS":
        print(f"ERROR: control {CONTROL} did not pass; cannot judge")
        return 2
    target = MAIN if MAIN in verdicts else names[0]
    if verdicts[target] == "SETUP FAILED":
        print(f"ERROR: {target} could not be set up; cannot judge")
        return 2
    if verdicts[target] == "FAIL":
        print(f"BUG PRESENT: {target}: a rank raised in or did not complete set_model_state_dict "
              "(or loaded wrong values) while the other went on to its next collective")
        return 1
    print(f"FIXED: {target}: every rank completed set_model_state_dict with the saved values")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])
    else:
        try:
            code = main(sys.argv[1:])
        except KeyboardInterrupt:
            code = 1
        except Exception:
            import traceback

            traceback.print_exc()
            code = 2
        sys.stdout.flush()
        os._exit(code)

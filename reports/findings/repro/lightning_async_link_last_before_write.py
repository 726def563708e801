"""Lightning: ModelCheckpoint(save_last="link") with AsyncCheckpointIO links `last.ckpt` to a file
the writer has not written yet.

Bug: with `save_last="link"`, ModelCheckpoint._link_checkpoint removes the old `last.ckpt` and
makes it a symbolic link to the step's checkpoint right after the step's save returns
(lightning/pytorch/callbacks/model_checkpoint.py, _save_last_checkpoint -> _link_checkpoint). Under
`Trainer(plugins=[AsyncCheckpointIO()])` that save only hands the checkpoint to a writer thread,
so the link is made before its target exists:
  A. into a checkpoint folder that does not exist yet (a new run's), os.symlink raises
     FileNotFoundError (the writer has not made the folder; the shutil.copy fallback fails too):
     fit dies at its first checkpoint;
  B. into an existing folder, a kill (preemption, OOM) before the writer has written the step's
     file leaves `last.ckpt` a dangling link, the previous one already removed:
     fit(ckpt_path="last") warns "there is no last checkpoint available" and starts from scratch,
     although the step before was written completely.
With `save_last=True` (the control) `last.ckpt` is a copy written through the same atomic write
after the step's file: the old one stays until the new one is in place, and the restart resumes
the step before the kill.

To make the timing deterministic, the writer's disk is slowed (each file written 1 s late, as a
large checkpoint on network storage) and each training step waits for the writes before it (a
step that takes longer than the disk). One process, CPU, `Trainer(accelerator="cpu", devices=1)`;
the run is a child process that SIGKILLs itself in the LightningModule's on_train_batch_end of
step 2, after ModelCheckpoint has handed step 2's file to the writer and linked it.

Correct behaviour: a `last` that names only written checkpoints (a link made when the write is
done, as NeMo's async-compatible save_last="link" and torchtitan's async save do), so that the
restart resumes step 1, as with save_last=True.

Seen on: lightning 2.6.6, torch 2.13.0+cpu.
Upstream: not found (Lightning-AI/pytorch-lightning issues and closed PRs searched: save_last link
came in PR 18748 and became opt-in in PR 19191, neither mentions AsyncCheckpointIO; the same
pattern reported and fixed elsewhere: KempnerInstitute/KempnerForge issue 102).

Run: python reports/findings/repro/lightning_async_link_last_before_write.py
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

WRITE_S = 1.0


def child(save_last, phase, folder):
    import torch
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
    from lightning.pytorch.plugins.io import AsyncCheckpointIO, TorchCheckpointIO
    from torch import nn

    class SlowDisk(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None):
            time.sleep(WRITE_S)
            super().save_checkpoint(checkpoint, path, storage_options)

    io = AsyncCheckpointIO(SlowDisk())

    class SlowerThanTheDisk(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if io._executor is not None:
                io._executor.submit(lambda: None).result()

    class Model(LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 4)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if phase == "run" and self.trainer.global_step == 2:
                os.kill(os.getpid(), signal.SIGKILL)

    torch.manual_seed(0)
    checkpoint = ModelCheckpoint(
        dirpath=folder, filename="{step}", every_n_train_steps=1, save_last=save_last, save_top_k=-1
    )
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=3 if phase == "run" else 0,
        callbacks=[SlowerThanTheDisk(), checkpoint],
        plugins=[io],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = torch.utils.data.DataLoader(torch.randn(8, 4, generator=torch.Generator().manual_seed(1)), batch_size=2)
    trainer.fit(Model(), data, ckpt_path=None if phase == "run" else "last")
    print(f"RESTART global_step={trainer.global_step} ckpt_path={trainer.ckpt_path}", flush=True)


def call(save_last, phase, folder):
    arg = "link" if save_last == "link" else "true"
    return subprocess.run(
        [sys.executable, __file__, "--child", arg, phase, str(folder)], capture_output=True, text=True, timeout=300
    )


def killed_then_restarted(save_last, folder):
    """The run killed after step 2's save; the folder as it left it; what the restart resumed."""
    run = call(save_last, "run", folder)
    if run.returncode != -signal.SIGKILL:
        return None, f"the run was not killed at step 2 (exit {run.returncode}): {run.stderr[-600:]}"
    left = {p.name: (os.readlink(p) if p.is_symlink() else "file", p.exists()) for p in Path(folder).iterdir()}
    restart = call(save_last, "restart", folder)
    lines = [line for line in restart.stdout.splitlines() if line.startswith("RESTART")]
    if restart.returncode != 0 or not lines:
        return None, f"the restart failed (exit {restart.returncode}): {restart.stderr[-600:]}"
    return (left, lines[-1]), ""


def main():
    base = Path(tempfile.mkdtemp())
    # control: save_last=True resumes step 1
    folder = base / "copy"
    folder.mkdir()
    got, why = killed_then_restarted(True, folder)
    if got is None:
        print(f"ERROR: control (save_last=True): {why}")
        return 2
    print(f"control save_last=True: left {got[0]}; {got[1]}")
    if "global_step=1 " not in got[1] + " ":
        print("ERROR: the control did not resume step 1; cannot judge")
        return 2
    bugs = []
    # A: a folder that does not exist yet
    first = call("link", "run", base / "new")
    if first.returncode != -signal.SIGKILL:
        error = [line for line in first.stderr.splitlines() if "Error" in line]
        bugs.append(f"A (a new folder): fit died at its first checkpoint: {error[-1] if error else first.returncode}")
    # B: an existing folder, killed after step 2's save
    folder = base / "link"
    folder.mkdir()
    got, why = killed_then_restarted("link", folder)
    if got is None:
        print(f"ERROR: save_last='link': {why}")
        return 2
    print(f"save_last='link': left {got[0]}; {got[1]}")
    if "global_step=1 " not in got[1] + " ":
        bugs.append(f"B (an existing folder): the restart did not resume step 1 ({got[1]}); folder left: {got[0]}")
    if bugs:
        for bug in bugs:
            print(f"BUG PRESENT: {bug}")
        return 1
    print("FIXED: save_last='link' with AsyncCheckpointIO resumes step 1 after the kill, as save_last=True does")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child("link" if sys.argv[2] == "link" else True, sys.argv[3], sys.argv[4])
        sys.exit(0)
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

"""The pools' temp folders (`conformance-worlds-*`: FileStores, logs, checkpoints): each names
its owner, is removed when its pool closes or its process gets SIGTERM, and what a SIGKILLed
run left is removed by the next pool that starts (its owner is dead). The standard library only."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

PREFIX = "conformance-worlds-"
OWNER = "owner"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return True


def remove(folder: Path, within_s: float = 5.0) -> None:
    """Remove `folder`, again while a dying process still writes into it, for up to `within_s`."""
    deadline = time.monotonic() + within_s
    while folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists() or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def remove_orphans(parent: Path | None = None) -> list[Path]:
    """Remove the pool folders under `parent` (the temp directory) whose owner is dead: what a
    SIGKILLed run left. A folder without an owner file is left alone (another version's, or
    one being made); returns what was removed."""
    removed = []
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            pid = int((folder / OWNER).read_text().strip())
        except (OSError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            remove(folder, within_s=0.0)
            removed.append(folder)
    return removed


def make(parent: Path | None = None) -> Path:
    """A new pool folder, owned by this process (after removing dead owners' leftovers)."""
    remove_orphans(parent)
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    (folder / OWNER).write_text(f"{os.getpid()}\n")
    return folder


def on_sigterm(close: Callable[[], None]) -> None:
    """Run `close` when this process gets SIGTERM, then die of it as it would have. Only from
    the main thread (signal handlers live there); elsewhere nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(Exception):
            close()
        if callable(previous):
            previous(signum, frame)  # another pool's, or pytest's
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)

"""torch_checkpointing's default storage cannot save to an ext4 or XFS directory: the write
opens the file with O_DIRECT, which those filesystems accept at open(), then writes unaligned
buffers, which they refuse: OSError: [Errno 22] Invalid argument.

Bug: LocalFileSystemStorageConfig(use_direct_io=True) is the default, and WriteStream
(torch_checkpointing/storage/filesystem.py) falls back to buffered I/O only when the open()
raises EINVAL. docs/storage.md: "The backend attempts O_DIRECT and transparently falls back to
buffered I/O when it is not available, so the same config works everywhere." Its reads already
handle the case ("XFS and ext4 accept the O_DIRECT open but reject unaligned reads with
EINVAL", _DirectIOReader); its writes do not. tmpfs and btrfs take unaligned O_DIRECT writes, so a
save there works.

Control: the same save with LocalFileSystemStorageConfig(use_direct_io=False) (the documented
knob) writes the checkpoint.

Seen on: torch_checkpointing 0.1.1, torch 2.13.0+cpu, ext4 (Linux 6.18), one process, sync save.
Run: python reports/findings/repro/torch_checkpointing_direct_io_ext4.py [DIRECTORY]
DIRECTORY: where to write (default: a new directory in the current one); on a filesystem that
accepts O_DIRECT at open() and refuses an unaligned write (ext4, XFS; the script probes it), else
exit 2: tmpfs and btrfs take unaligned O_DIRECT writes, and the default storage works there.
Exit 1 + "BUG PRESENT:" if it reproduces, 0 + "FIXED:" if not, 2 on any setup failure
(2 + "CANNOT SHOW HERE:" where the machine lacks what it needs).
"""

import os
import shutil
import sys
import tempfile
import traceback

import torch


def refuses_unaligned_direct_writes(directory):
    """True where open(O_DIRECT) succeeds and an unaligned write then fails (ext4, XFS): the
    case the storage must fall back in. tmpfs and btrfs take unaligned O_DIRECT writes."""
    probe = os.path.join(directory, "probe")
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
    except OSError:
        return False
    try:
        os.write(fd, b"abc")
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
        os.remove(probe)


def save(directory, name, storage_config):
    from torch_checkpointing import CheckpointManager

    config = CheckpointManager.Config.with_sync_save()
    config.storage_config = storage_config
    manager = CheckpointManager(config)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    try:
        manager.save(os.path.join(directory, name), {"model": model.state_dict(), "step": 1})
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        manager.close()
    return ""


def main():
    import torch_checkpointing
    from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig

    base = sys.argv[1] if len(sys.argv) > 1 else "."
    directory = tempfile.mkdtemp(prefix="tc-direct-io-", dir=base)
    try:
        return show(directory, torch_checkpointing, LocalFileSystemStorageConfig)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def show(directory, torch_checkpointing, LocalFileSystemStorageConfig):
    print(f"torch {torch.__version__}, torch_checkpointing {torch_checkpointing.__version__}, in {directory}")
    if not refuses_unaligned_direct_writes(directory):
        print("CANNOT SHOW HERE: this filesystem takes unaligned O_DIRECT writes or refuses O_DIRECT at open (tmpfs, btrfs): it cannot show the bug; run it on ext4 or XFS")
        return 2
    control = save(directory, "control", LocalFileSystemStorageConfig(use_direct_io=False))
    if control:
        print(f"ERROR: the control (use_direct_io=False) failed too: {control}")
        return 2
    print("control use_direct_io=False: the checkpoint is written")
    default = save(directory, "default", None)
    if default:
        print(f"BUG PRESENT: the default storage (use_direct_io=True) on this filesystem: save raised {default}")
        return 1
    print("FIXED: the default storage saves where unaligned O_DIRECT writes are refused")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)

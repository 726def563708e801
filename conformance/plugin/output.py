"""Everything a run writes is checked before its first cell: the report folder and, with
--update-baseline, the baseline file. A bad setting is one line and pytest's usage error (exit
4), never a traceback after the whole run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.baseline import load_baseline


def _writable_folder(path: Path, what: str) -> None:
    """`path` is a folder this process may write into, or one it can make."""
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(f"{what} {path} is a file, not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise pytest.UsageError(f"{what} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"{what} {path}: {existing} is not writable")


def check_output(report_dir: Path, baseline: str | None, update_baseline: bool) -> None:
    """UsageError naming what cannot be written: the report folder, or the baseline that
    --update-baseline rewrites (it must be readable TOML where it exists: its links and
    conditions are kept)."""
    _writable_folder(report_dir, "--report-dir")
    if update_baseline and baseline:
        path = Path(baseline)
        if path.is_dir():
            raise pytest.UsageError(f"--baseline {path} is a folder, not a file")
        if path.exists():
            if not os.access(path, os.W_OK):
                raise pytest.UsageError(f"--baseline {path} is not writable (--update-baseline rewrites it)")
            try:
                load_baseline(path)
            except (OSError, ValueError) as exc:
                raise pytest.UsageError(f"--baseline {path} cannot be read to be rewritten: {exc}") from None
        else:
            _writable_folder(path.parent, "--baseline's folder")

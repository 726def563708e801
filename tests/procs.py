"""Process helpers for the suite's own tests."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def pytest_cases(*args: str) -> list[str]:
    """The command line of a matrix run from this checkout, as a user types it: `python -m
    pytest cases -q` without pytest's cache, then `args`."""
    import sys

    return [sys.executable, "-m", "pytest", "cases", "-q", "-p", "no:cacheprovider", *args]

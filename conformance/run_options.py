"""The options a run of the matrix takes wherever it is started: declared once here, added to
pytest's parser by the plugin and to argparse by the torchrun launcher (conformance.launch).
Both parsers take the same keywords (default, choices, type, action, metavar, help)."""

from __future__ import annotations

from typing import Any

from conformance.matrix import PROFILES

RUN_OPTIONS: dict[str, dict[str, Any]] = {
    "--matrix": {
        "default": "default",
        "choices": sorted(PROFILES),
        "help": "matrix profile: " + "; ".join(f"{p.name}: {p.description}" for p in PROFILES.values()),
    },
    "--backend": {
        "default": "auto",
        "choices": ["auto", "gloo", "nccl"],
        "help": "process-group backend; auto: nccl where CUDA is available, else gloo",
    },
    "--case-timeout": {
        "type": float,
        "default": 60.0,
        "help": "seconds before a cell is a hang (default 60)",
    },
    "--strategy": {
        "action": "append",
        "default": [],
        "metavar": "MODULE:ATTR",
        "help": "run this registered strategy's cells (a RegisteredStrategy: package.module:ATTR, or "
        "the name of a 'conformance.strategies' entry point); repeatable; then only the strategies "
        "named run ('builtin': the built-in matrix). Default: the built-in matrix and every entry point",
    },
}


def add_run_options(add: Any) -> None:
    """Declare RUN_OPTIONS through `add` (pytest's group.addoption or argparse's add_argument)."""
    for name, kwargs in RUN_OPTIONS.items():
        add(name, **kwargs)

"""What sharing the trained and saved state between checks could save, read from a table.

Issue 35 asks that checks loading the same trained and saved state (the round trip, hygiene,
the corrupt variants, the template check, a transfer's saving side) train and save once per
configuration and world. This script bounds what that buys on a published table: cells are
grouped by the configuration they train and save (every axis but the check, its variant and a
transfer's loading side), and a group of k cells could at most skip the whole run time of its
k - 1 cheaper cells. The bound is loose on purpose: a cell that shares still loads, compares and
(hygiene) reads, so the real saving is a part of it.

    python bench/shared_work.py reports/torch-2.13.0-cpu-gloo/results.json.gz
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from conformance.outcome import CellResult, Outcome
from conformance.report.results import read_results

# checks that train and save a configuration before loading it (a transfer: on its saving side)
SAVING = ("roundtrip", "hygiene", "corrupt", "template", "reshard", "interop")
NOT_RUN = (Outcome.SKIP, Outcome.UNSUPPORTED)
# axes that say how a cell loads or checks, not what it trains and saves
LOADING = ("check", "variant", "backend", "direction", "storage_change", "load_world_size", "load_config")


def saved_configuration(axes: dict) -> tuple:
    return tuple(
        sorted((k, str(v)) for k, v in axes.items() if k not in LOADING and not k.startswith("load_"))
    )


def bound(cells: list[CellResult]) -> dict[str, float]:
    run = [c for c in cells if c.outcome not in NOT_RUN]
    groups: dict[tuple, list[float]] = defaultdict(list)
    for c in run:
        if c.axes["check"] in SAVING:
            groups[saved_configuration(c.axes)].append(c.duration_s)
    shared = [sorted(d) for d in groups.values() if len(d) > 1]
    return {
        "run cells": len(run),
        "run cell-seconds": sum(c.duration_s for c in run),
        "saving cells": sum(len(d) for d in groups.values()),
        "configurations they save": len(groups),
        "configurations saved by more than one cell": len(shared),
        "cells in them": sum(len(d) for d in shared),
        "cell-seconds at most saved (the k - 1 cheaper cells of each, whole)": sum(
            sum(d[:-1]) for d in shared
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", type=Path)
    for path in parser.parse_args().results:
        print(path)
        for name, value in bound(read_results(path)[1]).items():
            print(f"  {name}: {value:.0f}" if isinstance(value, float) else f"  {name}: {value}")


if __name__ == "__main__":
    main()

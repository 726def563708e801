"""Writes conformance/matrix/costs.json: the median measured duration of each cost group
(conformance.matrix.costs.groups) over the run cells of published results.json files, which a
covering profile uses to prefer cheap cells. Re-run after publishing a table on the reference
machine (2 cores, -n 2); the choice of cells changes only when this file does.

    python bench/costs.py reports/torch-2.13.0-cpu-gloo/results.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from conformance.matrix.costs import COSTS_FILE, medians
from conformance.report.results import read_results

# Outcomes whose duration measures nothing of the cell's work.
RAN_NOTHING = {"unsupported", "skip"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=COSTS_FILE)
    args = parser.parse_args()
    records = []
    for path in args.results:
        for cell in read_results(path)[1]:  # results.json or a published results.json.gz
            if cell.outcome.value in RAN_NOTHING or "load_config" in cell.axes:
                continue  # a transfer's cost is not one configuration's
            records.append((cell.axes, float(cell.duration_s or 0.0)))
    table = medians(records)
    args.out.write_text(
        json.dumps(
            {"sources": [str(p) for p in args.results], "cells": len(records), "medians": table}, indent=0
        )
        + "\n"
    )
    print(f"{args.out}: {len(table)} groups from {len(records)} cells")


if __name__ == "__main__":
    main()

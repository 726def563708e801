"""results.json: {"schema": 1, "environment": {...}, "cells": [{id, axes, outcome, detail, duration_s}]}."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.outcome import CellResult

SCHEMA = 1


def results_document(environment: dict[str, Any], cells: list[CellResult]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "environment": environment,
        "cells": [c.to_json() for c in sorted(cells, key=lambda c: c.id)],
    }


def write_results(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)  # never a half-written results.json


def read_results(path: Path) -> tuple[dict[str, Any], list[CellResult]]:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, this suite reads schema {SCHEMA}")
    return data["environment"], [CellResult.from_json(c) for c in data["cells"]]

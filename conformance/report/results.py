"""results.json: {"schema": 1, "environment": {...}, "cells": [{id, axes, outcome, detail, duration_s}]}.

A published table keeps it gzipped (results.json.gz, a tenth of the size: tracebacks repeat);
every reader here takes either, or the folder that holds one, so `results.json` in a command
still names a table whose file is gzipped."""

from __future__ import annotations

import gzip
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


RESULTS = "results.json"
GZIPPED = ".gz"


def results_file(path: Path) -> Path:
    """The results file `path` names: itself; in a folder, its results.json or results.json.gz;
    for a results.json that is not there, the results.json.gz beside it."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    if not path.exists() and path.suffix != GZIPPED and path.with_name(path.name + GZIPPED).exists():
        return path.with_name(path.name + GZIPPED)
    return path


def write_results(path: Path, document: dict[str, Any]) -> None:
    """Writes results.json, or gzipped when `path` ends in .gz."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, json.dumps(document, indent=2, sort_keys=False) + "\n")


def _write(path: Path, text: str) -> None:
    """The text at `path`, gzipped when it ends in .gz (byte-identical for the same text: no time
    stamp in the gzip header), never half-written."""
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == GZIPPED:
        tmp.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    else:
        tmp.write_text(text)
    tmp.replace(path)


def read_results(path: Path) -> tuple[dict[str, Any], list[CellResult]]:
    path = results_file(path)
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if path.suffix == GZIPPED else raw)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, this suite reads schema {SCHEMA}")
    return data["environment"], [CellResult.from_json(c) for c in data["cells"]]


def gzip_results(directory: Path) -> Path:
    """A published table's results.json, gzipped in place (results.json.gz, the plain one
    removed); returns the gzipped file."""
    plain = Path(directory) / RESULTS
    gzipped = plain.with_name(RESULTS + GZIPPED)
    _write(gzipped, plain.read_text())
    plain.unlink()
    return gzipped

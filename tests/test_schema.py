"""results.json against the JSON Schema in reports/ (a small validator: the keywords the
schema uses; no jsonschema dependency)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "reports" / "results.schema.json").read_text())
TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "null": type(None),
    "boolean": bool,
}


def problems(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    out = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        ok = any(
            isinstance(value, TYPES[k]) and not (k in ("integer", "number") and isinstance(value, bool))
            for k in kinds
        )
        if not ok:
            return [f"{where}: {type(value).__name__} is not {kinds}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        out += [f"{where}: missing {key!r}" for key in schema.get("required", []) if key not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                out += problems(value[key], sub, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += problems(item, schema["items"], f"{where}[{i}]")
    return out


def test_the_validator_can_fail() -> None:
    assert problems({"schema": 2, "cells": [{"id": 1}]}, SCHEMA)  # wrong version, missing keys, wrong type


def _published() -> list[Path]:
    """Each published table's results file: results.json, or gzipped."""
    return sorted((ROOT / "reports").glob("*/results.json*"))


def _document(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


@pytest.mark.parametrize("path", _published(), ids=lambda p: p.parent.name)
def test_published_results_match_the_schema(path: Path) -> None:
    found = problems(_document(path), SCHEMA)
    assert not found, "\n".join(found[:20])


def test_a_fresh_document_matches_the_schema() -> None:
    from conformance.case import Case
    from conformance.outcome import CellResult, Outcome
    from conformance.report.environment import environment
    from conformance.report.results import results_document

    case = Case("fsdp2", "shard", "dsd_sharded", "dcp", "adamw", "mlp", 2)
    env = environment(backend="gloo", world_sizes=[2], matrix="ci", args=[], hypothesis={"profile": "dev"})
    env["baseline"] = {"path": "b.toml", "sha256": "0" * 64, "profile": "ci"}
    cell = CellResult(case.id, {**case.axes(), "backend": "gloo"}, Outcome.PASS, "ok", 0.1)
    found = problems(results_document(env, [cell]), SCHEMA)
    assert not found, found


def test_published_checks_are_registered_ones() -> None:
    """The schema leaves the check axis open (a new check is one module and its registration);
    every check a published table names is a registered one or a property of one."""
    from conformance.check.registry import CHECKS

    known = {*CHECKS, *(f"property-{name}" for name, check in CHECKS.items() if check.properties)}
    for path in _published():
        named = {c["axes"]["check"] for c in _document(path)["cells"]}
        assert named <= known, (path, named - known)


def test_the_run_metadata_names_the_cpu_whose_kernels_decide_some_skips() -> None:
    """A DeepSpeed fp16 cell passes on a host whose CPU has oneDNN fp16 kernels and skips on one
    without: the metadata names the CPU and says which, and the table's header repeats it."""
    from conformance.report.environment import cpu_words, environment
    from conformance.report.results import results_document

    env = environment(backend="gloo", world_sizes=[2], matrix="ci", args=[])
    assert env["cpu"]["model"] and env["variant"]["cpu"] == env["cpu"]
    assert env["cpu"]["onednn_fp16"] in (True, False, None)
    assert cpu_words(env).startswith(f"CPU {env['cpu']['model']} (oneDNN fp16 kernels: ")
    assert cpu_words({}) == ""  # a table published before the field: nothing said
    assert not problems(results_document(env, []), SCHEMA)

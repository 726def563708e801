"""Shared code never names a library: the checks, the worlds, the matrix and the reports decide
nothing by a framework's name or attribute. What a library needs of them its adapter or its
storage says through the protocol (`held`, `shard_group_size`, `data_files`, OwnFormat)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ("check", "world", "matrix", "report", "optim", "precision")
# the libraries with adapters, and what of theirs once leaked into shared code (DeepSpeed's
# stages as whole words: torch's own FSDP1 strategy is hybrid_shard_zero2)
LIBRARY_WORDS = (
    "deepspeed",
    "ds_tensor",
    r"\bzero1\b",
    r"\bzero2\b",
    "lightning",
    "fabric",
    "_forward_module",
    "accelerate",
    "torchtitan",
    "torch_checkpointing",
    "OwnFormat",
)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (prose may name a library)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def library_words(path: Path) -> list[str]:
    """Each library word in the file's code: names, attributes and string constants, not its
    comments or docstrings."""
    tree = ast.parse(path.read_text())
    prose = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, ast.alias):
            text = node.name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value
        else:
            continue
        found += [
            f"line {node.lineno}: {w}" for w in LIBRARY_WORDS if re.search(w, text, flags=re.IGNORECASE)
        ]
    return found


@pytest.mark.parametrize("package", SHARED)
def test_shared_code_names_no_library(package: str) -> None:
    leaks = {
        str(path.relative_to(ROOT)): words
        for path in sorted((ROOT / "conformance" / package).rglob("*.py"))
        if (words := library_words(path))
    }
    assert not leaks, leaks


def test_the_scan_sees_a_leak(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text(
        '"""Docs may say deepspeed."""\nx = getattr(p, "ds_tensor", None)  # a comment: lightning\n'
    )
    assert library_words(leaky) == ["line 2: ds_tensor"]

"""The check registry is the one list of checks: each has its test in cases/, cells in every
profile, and nothing else lists them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conformance.check.registry import CHECKS
from conformance.matrix import PROFILES, cells

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", list(CHECKS))
def test_each_check_has_its_test_in_cases(name: str) -> None:
    tree = ast.parse((ROOT / "cases" / f"test_{name}.py").read_text())
    arguments = [a.arg for f in tree.body if isinstance(f, ast.FunctionDef) for a in f.args.args]
    assert CHECKS[name].fixture in arguments


@pytest.mark.parametrize("name", list(CHECKS))
@pytest.mark.parametrize("profile", list(PROFILES))
def test_each_check_has_cells_in_every_profile_each_of_its_own_check(name: str, profile: str) -> None:
    got = cells(profile, name)
    assert got and all(c.check == name for c in got)
    assert [c.id for c in got] == sorted({c.id for c in got})  # sorted, no duplicate id


def test_feature_names_are_unique() -> None:
    names = [f.name for check in CHECKS.values() for f in check.features]
    assert len(names) == len(set(names))


def test_no_module_lists_the_checks_by_name() -> None:
    """A tuple or list of three or more check names anywhere in the package is a second list
    (a strategy's own declaration, Supports(checks=...), is not)."""
    offenders = []
    for path in (ROOT / "conformance").rglob("*.py"):
        tree = ast.parse(path.read_text())
        declared = {id(k.value) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "checks"}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in declared:
                words = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if len(words & set(CHECKS)) >= 3:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders

"""The check registry is the one list of checks: each has its test in cases/ (made from the
registry), cells in every profile, and nothing else lists them; a new check is its module and
its registration."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conformance.check.registry import CHECKS
from conformance.matrix import PROFILES, cells
from conformance.matrix.cells import strategy_cells

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", list(CHECKS))
def test_each_check_has_its_test_in_cases(name: str) -> None:
    """cases/test_checks.py makes `test_<check>` from the registry, taking the check's fixture."""
    import importlib.util
    import inspect

    spec = importlib.util.spec_from_file_location("cases_test_checks", ROOT / "cases" / "test_checks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    test = getattr(module, f"test_{name}")
    assert CHECKS[name].fixture in inspect.signature(test).parameters


@pytest.mark.parametrize("name", list(CHECKS))
@pytest.mark.parametrize("profile", list(PROFILES))
def test_each_check_has_cells_in_every_profile_each_of_its_own_check(name: str, profile: str) -> None:
    got = cells(profile, name)
    if not got and CHECKS[name].needs:  # a check of registered strategies only: the tests' library's
        from tests.lifecycle_strategies import FOLDERS

        got = strategy_cells(FOLDERS, profile, name)
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


def test_a_new_check_is_its_module_and_its_registration(tmp_path: Path) -> None:
    """tests/new_check_plugin.py is all a new check is: registered, it has its pytest test, its
    cells run, and results.json and the report carry it, with nothing else edited."""
    from tests.test_plugin import outcomes, run_cases

    code, results, log = run_cases(
        tmp_path, "-p", "tests.new_check_plugin", "--matrix", "ci", "-k", "test_again"
    )
    assert code == 0, log
    assert outcomes(results) == {"again-ddp-sd_full-torch_save-adamw-mlp-w2": "pass"}, log
    assert {c["axes"]["check"] for c in results["cells"]} == {"again"}
    report = (tmp_path / "run" / "matrix.md").read_text()
    assert "| Again: the round trip once more, as a check of its own | 1 | 1 |" in report
    page = (tmp_path / "run" / "matrix.html").read_text()
    assert 'id="again"' in page  # its grid

"""A layout is an object, and a new one is one file: tests/new_layout_plugin.py, registered from
outside the package, runs end to end; the sanity check reads its claims; and no shared code
decides behaviour by comparing a wrapper, sharding or family name."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_plugin import outcomes, run_cases

ROOT = Path(__file__).resolve().parents[1]
NAMED_AXES = {"family", "sharding", "wrapper"}
# where a layout's or a library's own values are spelled: the layout objects, the adapters
OWNERS = ("conformance/layout/", "conformance/adapters/")
# functions that compare a name to spell an id, not to decide behaviour: the id leaves out a
# family's default sharding
FORMATTING = {"conformance/case.py": {"wrapper_token"}}


def test_a_layout_from_outside_the_package_runs_and_its_refusal_holds(tmp_path: Path) -> None:
    code, results, log = run_cases(
        tmp_path, "--strategy", "tests.new_layout_plugin:STRATEGY", "--matrix", "ci", "-k", "root_only"
    )
    assert code == 0, log
    got = outcomes(results)
    ran = {i: o for i, o in got.items() if o != "unsupported"}
    assert ran and set(ran.values()) == {"pass"}, got
    assert all("fsdp2+root" in i for i in ran), ran
    assert not [i for i in ran if "w4" in i], ran  # what it refuses never runs...
    # ...and is a rule, not a row: default's reshard has the 4-rank worlds (ci's reshards a
    # registered strategy 1 <-> 2 only)
    _, results, log = run_cases(
        tmp_path,
        "--strategy",
        "tests.new_layout_plugin:STRATEGY",
        "--matrix",
        "default",
        "-k",
        "root_only and test_reshard and w4",
        name="w4",
    )
    rules = results["environment"]["unsupported"]["rules"]
    refused = [r for r in rules if "tried at 1 and 2 ranks only" in r["reason"]]
    assert refused and {r["check"] for r in refused} == {"reshard"}, log


def test_the_sanity_check_holds_a_layout_to_its_claim(tmp_path: Path) -> None:
    """The same sharded wrapper under a layout that claims to replicate: the sanity check takes
    group_size from the layout object and fails the cell."""
    code, results, log = run_cases(
        tmp_path, "--strategy", "tests.new_layout_plugin:BROKEN", "--matrix", "ci", "-k", "w2"
    )
    assert code == 1, log
    failed = [c for c in results["cells"] if c["outcome"] == "fail"]
    assert failed, log
    assert all("a replica must hold all" in c["detail"] for c in failed), failed


def _name_comparisons(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    spared = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        and function.name in FORMATTING.get(str(path.relative_to(ROOT)), ())
        for node in ast.walk(function)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and id(node) not in spared:
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Attribute) and side.attr in NAMED_AXES:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_shared_code_compares_a_layout_name() -> None:
    offenders = [
        hit
        for path in sorted((ROOT / "conformance").rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(OWNERS)
        for hit in _name_comparisons(path)
    ]
    assert not offenders, f"compare the layout object's answer instead (conformance.layout): {offenders}"

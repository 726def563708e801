"""An optimizer and a precision are objects, and a new one is one file registered from outside
the package: tests/new_optimizer_plugin.py (Lion, an optimizer from outside torch.optim) and
tests/new_precision_plugin.py (bf16 compute with fp32 reduction) run end to end through
`-p module`, the ranks importing the plugin too; the round trip catches an optimizer whose
saved state is wrong (tests/broken_optimizers.py); DDP refuses the new precision by the rule it
has for every precision that casts; and no shared code compares an optimizer or precision name."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_plugin import outcomes, run_cases

ROOT = Path(__file__).resolve().parents[1]
AXES = {"optimizer", "precision"}
PLUGINS = ("-p", "tests.broken_optimizers", "-p", "tests.new_precision_plugin")
LION_PASSES = ("fsdp2-dsd_sharded-dcp-lion-mlp-w2", "fsdp1_full_shard-sd_full-torch_save-lion-mlp-w2")
BROKEN_LION = ("fsdp2-dsd_sharded-dcp-broken_lion-mlp-w2", "ddp-sd_full-torch_save-broken_lion-mlp-w2")
BF16R32 = (
    "hygiene-fsdp2-dsd_full-dcp-adamw-mlp-bf16r32-w2",
    "hygiene-fsdp1_full_shard-sd_full-torch_save-adamw-mlp-bf16r32-w2",
)


def test_a_plugin_optimizer_and_precision_run_and_a_broken_optimizer_is_caught(tmp_path: Path) -> None:
    selected = " or ".join(
        (*LION_PASSES, *BROKEN_LION, *BF16R32, "hygiene-ddp-dsd_full-dcp-adamw-mlp-bf16r32-w2")
    )
    code, results, log = run_cases(tmp_path, *PLUGINS, "--matrix", "ci-product", "-k", selected)
    assert code == 1, log  # the broken optimizer's cells fail
    got = outcomes(results)
    assert {i: got.get(i) for i in (*LION_PASSES, *BF16R32)} == dict.fromkeys(
        (*LION_PASSES, *BF16R32), "pass"
    )
    assert {i: got.get(i) for i in BROKEN_LION} == dict.fromkeys(BROKEN_LION, "fail"), got
    details = {c["id"]: c["detail"] for c in results["cells"]}
    assert all("exp_avg: values differ" in details[i] for i in BROKEN_LION), details
    # DDP has no mixed-precision setting: the plugin's precision is refused by the same rule as bf16
    rules = results["environment"]["unsupported"]["rules"]
    assert any("DDP has no mixed-precision setting" in r["reason"] for r in rules), rules


def test_a_library_from_outside_the_package_runs(tmp_path: Path) -> None:
    """tests/new_library_plugin.py: safetensors' save_model / load_model as a library row, one
        file, every cell it declares run and bitwise (the property cells' generated models tie weights
    too)."""
    code, results, log = run_cases(
        tmp_path,
        "--strategy",
        "tests.new_library_plugin:STRATEGY",
        "--matrix",
        "ci",
        "-k",
        "safetensors_model",
    )
    assert code == 0, log
    ran = {i: o for i, o in outcomes(results).items() if o != "unsupported"}
    assert len(ran) >= 8 and set(ran.values()) == {"pass"}, ran
    assert any(i.startswith("resume-") for i in ran) and any(i.startswith("property-") for i in ran), ran


def test_a_plugin_value_joins_the_slices_of_every_profile() -> None:
    """Lion joins the optimizers slice and bf16r32 the mixed-precision ones, in ci and in the
    covering default (which meets every pair of values, the new ones too)."""
    for profile in ("ci", "default"):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "cases", "--collect-only", "-q", "-p", "no:cacheprovider", *PLUGINS,
             "--matrix", profile, "-k", "lion or bf16r32"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        ids = [line for line in proc.stdout.splitlines() if "::" in line]
        assert any("-lion-" in i for i in ids) and any("-bf16r32-" in i for i in ids), proc.stdout[-2000:]


def test_the_wrappers_take_a_precision_from_its_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without importing the plugin here: its registration would outlive this test in the worker."""
    import torch

    from conformance.case import Case
    from conformance.layout.registry import LAYOUTS
    from conformance.precision.base import Precision
    from conformance.precision.registry import PRECISIONS

    dtypes = (("param_dtype", torch.bfloat16), ("reduce_dtype", torch.float32))
    monkeypatch.setitem(PRECISIONS, "bf16r32", Precision("bf16r32", fsdp1=dtypes, fsdp2=dtypes))
    for wrapper, sharding in (("fsdp1", "full_shard"), ("fsdp2", "shard")):
        case = Case(wrapper, sharding, "dsd_full", "dcp", "adamw", "mlp", 2, "bf16r32")
        assert LAYOUTS[(wrapper, sharding)].build(case).mixed == dtypes  # type: ignore[attr-defined]


def _literal_name_comparisons(path: Path) -> list[str]:
    """Comparisons of an optimizer or precision axis (case.optimizer, axes["precision"]) with a
    string literal: code that decides by a value's name instead of asking its object."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = (node.left, *node.comparators)
        axis = any(
            (isinstance(s, ast.Attribute) and s.attr in AXES)
            or (isinstance(s, ast.Subscript) and isinstance(s.slice, ast.Constant) and s.slice.value in AXES)
            for s in sides
        )
        literal = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)
        if axis and literal:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_shared_code_compares_an_optimizer_or_precision_name() -> None:
    offenders = [
        hit
        for path in sorted((ROOT / "conformance").rglob("*.py"))
        for hit in _literal_name_comparisons(path)
    ]
    assert not offenders, (
        f"ask the axis object instead (conformance.optim, conformance.precision): {offenders}"
    )

"""The cross-version grid (reports/crossversion/README.md): configuration by (saved by, loaded by)
torch, from each pair's results.json; then every cell that did not pass, with the first line
of its detail, whether the same configuration passes within each of the two versions, and the
findings that explain it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from conformance.findings import Finding, explaining, load_findings
from conformance.outcome import CellResult, Outcome, first_line
from conformance.report.history import version_key
from conformance.report.results import read_results

PAIR_DIR = re.compile(r"torch-(?P<save>[^-]+)-to-(?P<load>[^-]+)")


def read_pairs(root: Path) -> dict[tuple[str, str], list[CellResult]]:
    out = {}
    for path in sorted(root.glob("torch-*-to-*/results.json")):
        match = PAIR_DIR.fullmatch(path.parent.name)
        if match:
            out[(match["save"], match["load"])] = read_results(path)[1]
    return out


def _config(cell: CellResult) -> str:
    return cell.id.split("-to-", 1)[1].split("-", 1)[1]  # crossversion-X-to-Y-<case id>


def render_grid(by_pair: dict[tuple[str, str], list[CellResult]], findings: Sequence[Finding]) -> str:
    order = sorted(by_pair, key=lambda p: (p[0] != p[1], version_key(p[0]), version_key(p[1])))
    outcome = {(pair, _config(c)): c for pair, cells in by_pair.items() for c in cells}
    configs = sorted({config for _, config in outcome})
    headers = ["configuration", *(f"{x} -> {y}" for x, y in order)]
    body = [
        [config, *(outcome[(p, config)].outcome.value if (p, config) in outcome else "" for p in order)]
        for config in configs
    ]
    versions = sorted({v for pair in by_pair for v in pair}, key=version_key)
    lines = [
        "# Checkpoints across torch versions",
        "",
        f"Saved by one torch, loaded by another: {', '.join(versions)}. Each cell trains the "
        "configuration in 2 ranks (gloo, CPU) in the saving version's own venv, saves, then loads "
        "into a fresh model of the same configuration in the loading version's venv, and compares "
        "the canonical state (parameters, buffers, every piece of optimizer state) bitwise. "
        "`X -> X` columns are each version with itself: a cross-version cell is read against them. "
        "Made by `python -m conformance crossversion --torch ...`.",
        "",
        tabulate(body, headers=headers, tablefmt="github"),
        "",
    ]
    across, within = [], {}
    for (x, y), config in sorted(outcome, key=lambda k: (k[1], version_key(k[0][0]), version_key(k[0][1]))):
        cell = outcome[((x, y), config)]
        if cell.outcome is Outcome.PASS:
            continue
        own = [outcome.get(((v, v), config)) for v in (x, y)]
        why = (
            "; ".join(f"{f.kind}: {f.title} [{f.id}]" for f in explaining(cell, list(findings)))
            or "not explained yet"
        )
        if cell.outcome is Outcome.HARNESS_ERROR:
            why = "a harness-error: the suite's own code raised, no verdict on the load"
        if all(o is not None and o.outcome is cell.outcome for o in own):  # each version does it alone
            within.setdefault(config, []).append((f"{x} -> {y}", cell, why))
            continue
        states = ", ".join(f"{v} -> {v}: {o.outcome.value}" for v, o in zip((x, y), own) if o is not None)
        across.append(
            f"- `{config}` saved by {x}, loaded by {y}: **{cell.outcome.value}** ({states}). {first_line(cell.detail)} ({why})"
        )
    lines += ["## Across versions: cells that differ from what each version does alone", ""]
    lines += across or ["None."]
    lines += ["", "## What each version does alone (the same outcome across versions)", ""]
    for config, cells in sorted(within.items()):
        _, first, why = cells[0]
        pairs = ", ".join(p for p, _, _ in cells)
        lines.append(
            f"- `{config}`: **{first.outcome.value}** in {pairs}. {first_line(first.detail)} ({why})"
        )
    return "\n".join(lines) + "\n"


def write_grid(root: Path) -> Path:
    path = root / "README.md"
    path.write_text(render_grid(read_pairs(root), load_findings()))
    return path

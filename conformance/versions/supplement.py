"""`python -m conformance publish --add -- --strategy NAME`: rows added to a published table
without running its other cells again.

A new registered strategy (an adapter) brings cells of its own; running the whole default
matrix again for them costs an hour on two cores. With --add, publish runs only what its
pytest arguments select (`--strategy deepspeed`: that strategy's cells, every check) in the
same venv, then writes the table as it was with those cells added, or replacing the cells of
the same id, and says so: the environment's `supplements` lists each addition (the suite
commit and time it ran at, its pytest arguments, how many cells it added and replaced), and
matrix.md names them under its header (conformance.report.markdown). The cells of a warm world do not depend on which cells
ran before (docs/how-it-works.md), so a cell run alone is the cell the whole run would give.

An addition must be of the same table: the same torch build, backend, device, profile and
hypothesis settings; a table gated on a baseline (a ci slice) is published whole instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.outcome import CellResult
from conformance.report.results import read_results

# what makes two runs cells of one table
SAME_TABLE = (
    "torch",
    "torch_git",
    "backend",
    "device",
    "device_count",
    "matrix",
    "hypothesis",
)
# (world_sizes: an addition's selected cells run at some of the table's, never at another)
# the per-strategy metadata an addition brings (name -> versions or text)
MERGED = ("strategies", "strategy_descriptions", "frameworks")


class SupplementError(ValueError):
    """The addition is not of the published table."""


def mismatch(table: dict[str, Any], added: dict[str, Any]) -> str:
    """Why `added` is not of the table whose environment is `table` ("" when it is)."""
    if table.get("baseline"):
        return "the table was gated on a baseline (a ci slice): publish it whole"
    differ = [key for key in SAME_TABLE if table.get(key) != added.get(key)]
    if not set(added.get("world_sizes") or ()) <= set(table.get("world_sizes") or ()):
        differ.append("world_sizes")
    if differ:
        return "the addition ran with another " + ", ".join(
            f"{key} ({added.get(key)!r}, the table: {table.get(key)!r})" for key in differ
        )
    return ""


def supplement(
    table_path: Path, added_path: Path, selection: list[str]
) -> tuple[dict[str, Any], list[CellResult]]:
    """The table at `table_path` with the cells of the run at `added_path` added (a cell of the
    same id replaced), and its environment recording the addition and the pytest arguments
    that selected its cells."""
    table_env, table_cells = read_results(table_path)
    added_env, added_cells = read_results(added_path)
    problem = mismatch(table_env, added_env)
    if problem:
        raise SupplementError(problem)
    new_ids = {c.id for c in added_cells}
    kept = [c for c in table_cells if c.id not in new_ids]
    env = dict(table_env)
    for key in MERGED:
        env[key] = {**(table_env.get(key) or {}), **(added_env.get(key) or {})}
    variant = dict(env.get("variant") or {})
    if variant:
        variant["frameworks"] = env["frameworks"]
        env["variant"] = variant
    record = {
        "suite_commit": added_env.get("suite_commit"),
        "time_utc": added_env.get("time_utc"),
        "selection": selection,
        "added": len(new_ids) - (len(table_cells) - len(kept)),
        "replaced": len(table_cells) - len(kept),
    }
    env["supplements"] = [*(table_env.get("supplements") or []), record]
    return env, kept + added_cells

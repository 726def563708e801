"""The tables both renderers show, as plain data (headers, rows of words): the per-check grids
(the square save x load grid among them) and the feature x strategy table in the style of
MDN's browser-compat tables. Markdown and HTML only decide how a word looks. A harness-error
is never a result of the strategy: it counts neither way, and a feature with one says so."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from conformance.case import Case
from conformance.check.base import Feature, GridCells, ReshardCells
from conformance.check.registry import CHECKS
from conformance.check.relayout import LayoutCells
from conformance.outcome import FAILING, CellResult, Outcome
from conformance.report.impact import Judged, worst_of

Table = tuple[list[str], list[list[str]]]

REFUSED = "refused, as it must"  # how a transfer that cannot load by design and raised begins
NOT_RUN = (Outcome.SKIP, Outcome.UNSUPPORTED)
# Not a result of the strategy: counted neither way ([passed/run], the feature words).
NOT_A_RESULT = (*NOT_RUN, Outcome.HARNESS_ERROR)


def word(cell: CellResult, known: Mapping[str, Any] | None = None) -> str:
    """The outcome as the tables show it: refusals of reshard / interop and failures a
    baseline expects are words of their own."""
    if known and cell.id in known:
        return f"known {cell.outcome.value}"
    if cell.outcome is Outcome.PASS and cell.detail.startswith(REFUSED):
        return "refused"
    return cell.outcome.value


def passed(cell: CellResult) -> bool:
    return cell.outcome is Outcome.PASS  # a refusal that raised as it must is a pass


def grid(
    cells: list[CellResult],
    row: Callable[[CellResult], tuple[str, ...]],
    column: Callable[[CellResult], str],
    row_headers: list[str],
    known: Mapping[str, Any],
) -> Table:
    """Cells by (row key, column key), with [passed/run] per row and column. An empty entry:
    the profile has no such cell."""
    rows: dict[tuple[str, ...], dict[str, CellResult]] = defaultdict(dict)
    for cell in cells:
        rows[row(cell)][column(cell)] = cell
    columns = sorted({column(c) for c in cells})
    body = []
    for key in sorted(rows):
        by_col = rows[key]
        ran = [c for c in by_col.values() if c.outcome not in NOT_A_RESULT]
        entries = [word(by_col[col], known) if col in by_col else "" for col in columns]
        body.append([*key, *entries, f"[{sum(map(passed, ran))}/{len(ran)}]"])
    totals = []
    for col in columns:
        ran = [r[col] for r in rows.values() if col in r and r[col].outcome not in NOT_A_RESULT]
        totals.append(f"[{sum(map(passed, ran))}/{len(ran)}]")
    body.append([*("" for _ in row_headers[:-1]), "passed/run", *totals, ""])
    return [*row_headers, *columns, "passed/run"], body


HEADERS = ["wrapper", "sharding", "api", "kind", "storage", "optimizer", "model", "precision"]


def check_table(check: str, cells: list[CellResult], known: Mapping[str, Any]) -> Table:
    """One check's grid: strategies by world size; resharding by N-to-M pair; interop as the
    square grid, rows the saving configuration and columns the loading one."""
    shape = getattr(CHECKS.get(check.removeprefix("property-")), "shape", None)  # a property: its check's
    if isinstance(shape, ReshardCells):
        return grid(
            cells,
            lambda c: tuple(str(c.axes[k]) for k in ("wrapper", "sharding", "api", "storage")),
            lambda c: f"w{c.axes['save_world_size']} to w{c.axes['load_world_size']}",
            ["wrapper", "sharding", "api", "storage"],
            known,
        )
    if isinstance(shape, LayoutCells):  # a grid per source layout: its row, a column per target
        return grid(
            cells,
            lambda c: (str(c.axes["layout"]), str(c.axes["api"]), str(c.axes["storage"])),
            lambda c: f"to {c.axes['load_layout']}",
            ["saved in", "api", "storage"],
            known,
        )
    if isinstance(shape, GridCells):
        return grid(
            cells,
            lambda c: (f"{config(c)} w{c.axes['world_size']}",),
            lambda c: str(c.axes["load_config"]),
            ["saved by \\ loaded by"],
            known,
        )
    extra = [axis for axis in ("mesh", "variant") if any(c.axes.get(axis) for c in cells)]
    keys = HEADERS + extra
    return grid(
        cells,
        lambda c: tuple(str(c.axes.get(k, "")) for k in keys),
        lambda c: f"w{c.axes['world_size']}",
        keys,
        known,
    )


_CASE_FIELDS = [f.name for f in fields(Case) if f.name not in ("check", "variant")]


def config(cell: CellResult) -> str:
    """The strategy of a cell (its saving side for reshard / interop): wrapper token, API and
    storage, as in the cell id."""
    return Case(**{name: cell.axes[name] for name in _CASE_FIELDS if name in cell.axes}).config


def features() -> tuple[tuple[str, Feature], ...]:
    """(check, feature): the columns of the feature table, each check's own, in the registry's
    order (conformance.check.registry)."""
    return tuple((name, feature) for name, check in CHECKS.items() for feature in check.features)


def check_of(cell: CellResult) -> str:
    return str(cell.axes.get("check", "roundtrip"))  # results of schema 1 before the axis existed


def counts_for(feature: Feature, cell: CellResult) -> str:
    """The strategy row a cell counts for: the configuration that saved, or that loaded."""
    return str(cell.axes["load_config"]) if feature.by_loader else config(cell)


SUPPORT_WORDS = {
    "yes": "every cell of the feature that ran passed",
    "corrupts, loses, drifts, diverges, refuses, crashes, hangs": "no cell that ran passed; the word is how bad "
    "the worst of their differences is (conformance.observed.IMPACTS), with where it holds when "
    "that is not everywhere (CPU only) and the finding behind it",
    "partial p/n, <impact>": "p of the n cells that ran passed; the worst of the others",
    "known <impact>": "every failure is one the baseline expects",
    "no": "no cell that ran passed (a run rendered without findings)",
    "unsupported": "the feature is not supported by design for this strategy",
    "n/a": "no supported cell of the full declaration has the feature on this row (the same rules as "
    "unsupported, or its check declares no such cell here): not a question, not a debt",
    "skip": "its cells cannot run in this environment (see the reasons)",
    "unknown": "the run has no cell for it: not tested, which is not a no (the full declaration has a supported one)",
    "harness error": "the suite itself failed on a cell of it: no verdict on the strategy until it is fixed",
}


def support(
    cells: list[CellResult], known: Mapping[str, Any], judged: Mapping[str, Judged] | None = None
) -> str:
    """One word for how a strategy does on one feature, over the cells that test it; where some
    failed, how bad the worst is (`judged`: report.impact.judge_cells), its scope when not
    everywhere, and the finding behind it in brackets."""
    if not cells:
        return "unknown"
    if any(c.outcome is Outcome.HARNESS_ERROR for c in cells):
        return "harness error"
    ran = [c for c in cells if c.outcome not in NOT_RUN]
    if not ran:
        if any(c.outcome is Outcome.SKIP for c in cells):
            return "skip"
        if any(c.axes.get(RULE_UNKNOWN) for c in cells):
            return "unknown"  # a strategy of a summary row has a supported cell not run here
        return "n/a" if all(c.axes.get(RULE_NA) for c in cells) else "unsupported"
    good = sum(map(passed, ran))
    if good == len(ran):
        return "yes"
    failing = [c for c in ran if c.outcome in FAILING]
    bad = worst_of(failing, judged) if judged else None
    if bad is None:
        return (
            f"partial {good}/{len(ran)}"
            if good
            else ("known no" if failing and all(c.id in known for c in failing) else "no")
        )
    text = bad.impact + (f" ({bad.scope})" if bad.scope and bad.scope != "all devices" else "")
    text += f" [{bad.finding}]" if bad.finding else ""
    if good:
        return f"partial {good}/{len(ran)}, {text}"
    return f"known {text}" if all(c.id in known for c in failing) else text


NO_FEATURE_CELLS = (
    "No cell of this run tests one of these features (a run of the properties alone, for example): "
    "the tables below have its results."
)


# The axes of a stand-in for an answer of folded unsupported cells (report.rules.ruled_cells).
RULE_ROW, RULE_FEATURE = "rule_row", "rule_feature"
# The stand-ins of a published table's answers from the full declaration (report.applicable): n/a
# (no supported cell there), and a debt (unknown: a supported cell there that this run did not run).
RULE_NA, RULE_UNKNOWN = "rule_na", "rule_unknown"


def feature_cells(cells: list[CellResult]) -> dict[tuple[str, str], list[CellResult]]:
    """(strategy row, feature) -> the cells that test it (a stand-in of a folded rule: the
    answer it stands for)."""
    tested: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for cell in cells:
        if RULE_ROW in cell.axes:
            tested[(str(cell.axes[RULE_ROW]), str(cell.axes[RULE_FEATURE]))].append(cell)
            continue
        for check, feature in features():
            if check_of(cell) == check and feature.selects(cell.axes):
                tested[(counts_for(feature, cell), feature.name)].append(cell)
    return tested


def feature_table(
    cells: list[CellResult], known: Mapping[str, Any], judged: Mapping[str, Judged] | None = None
) -> Table:
    """Strategies (rows) by features (columns); see features() and SUPPORT_WORDS."""
    columns = features()
    tested = feature_cells(cells)
    strategies = sorted({strategy for strategy, _ in tested})
    body = [
        [s, *(support(tested.get((s, f.name), []), known, judged) for _, f in columns)] for s in strategies
    ]
    return ["strategy", *(f.name for _, f in columns)], body


def summary_group(row: str, registered: set[str]) -> str:
    """The summary row a strategy row folds into: a registered strategy and its state-dict kind,
    or a built-in wrapper family and its API (storages, shardings and options folded in)."""
    parts = row.split("-")
    if parts[0] in registered and len(parts) >= 3:
        return f"{parts[0]} {parts[2]}"
    family = parts[0].split("+")[0].split("_")[0]
    return f"{family} {parts[1]}" if len(parts) > 1 else family


NOTHING_RAN = ("unsupported", "unknown", "skip", "n/a")


def summary_table(
    cells: list[CellResult], known: Mapping[str, Any], judged: Mapping[str, Judged] | None = None
) -> tuple[Table, list[str]]:
    """The first screen, "what works": a row per wrapper family x API (a registered strategy x
    kind), each feature over every cell of its strategy rows; and the rows in which nothing ran
    (every entry unsupported, unknown or skip), folded into a list."""
    columns = features()
    grouped = _summary_cells(cells)
    single = one_cause_rows(cells, judged) if judged else {}
    body, folded = [], []
    for group in sorted({g for g, _ in grouped}):
        words = [support(grouped.get((group, f.name), []), known, judged) for _, f in columns]
        if all(w in NOTHING_RAN for w in words):
            folded.append(group)
        elif group not in single:
            body.append([group, *words])
    return (["wrapper family / strategy, API", *(f.name for _, f in columns)], body), folded


def _summary_cells(cells: list[CellResult]) -> dict[tuple[str, str], list[CellResult]]:
    registered = {str(c.axes.get("strategy")) for c in cells if c.axes.get("strategy")}
    grouped: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for (row, feature), tested in feature_cells(cells).items():
        grouped[(summary_group(row, registered), feature)] += tested
    return grouped


def one_cause_rows(cells: list[CellResult], judged: Mapping[str, Judged]) -> dict[str, tuple[int, Judged]]:
    """The summary rows whose every cell that ran failed, all explained by one and the same
    finding: row -> (how many ran, that cause). The tables show such a row as its one cause."""
    rows: dict[str, dict[str, CellResult]] = defaultdict(dict)
    for (group, _), tested in _summary_cells(cells).items():
        rows[group].update((c.id, c) for c in tested)
    out = {}
    for group, by_id in rows.items():
        ran = [c for c in by_id.values() if c.outcome not in NOT_RUN]
        causes = {judged[c.id].findings if c.id in judged else None for c in ran}
        if len(ran) > 1 and len(causes) == 1:
            (cause,) = causes
            bad = worst_of(ran, judged)
            if cause is not None and len(cause) == 1 and bad is not None and bad.explained:
                out[group] = (len(ran), bad)
    return out

"""python -m conformance: the reports from results.json alone, without a re-run.

render RESULTS.json [-o matrix.md]   the Markdown and HTML matrix, and FINDINGS.md (--fold: and
                                     results.json with its unsupported rows folded into rules)
diff OLD.json NEW.json               two runs side by side; exit 1 on a regression
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from conformance.outcome import CellResult
from conformance.report.markdown import render_markdown
from conformance.report.results import GZIPPED, read_results, results_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="write matrix.md from a results.json (no re-run)")
    render.add_argument("results", type=Path, help="results.json, results.json.gz, or the folder holding one")
    render.add_argument("-o", "--output", type=Path, help="default: matrix.md beside the results")
    render.add_argument("--baseline", type=Path, help="mark the failures this baseline expects as known")
    render.add_argument("--findings", type=Path, help="findings data (default: reports/findings.toml)")
    render.add_argument(
        "--fold",
        action="store_true",
        help="rewrite results.json with its unsupported rows folded into rules (and, for a covering "
        "profile's table, the unsupported cells of its declaration): what a run writes since the fold",
    )
    render.add_argument(
        "--gzip",
        action="store_true",
        help="with --fold: write the folded results gzipped (results.json.gz, as a published table keeps them)",
    )
    render.add_argument(
        "--na",
        action="store_true",
        help="answer the feature table's unknown entries from the full declaration (n/a where no supported "
        "cell can have them, else still unknown) and store the answers in results.json, as publish does",
    )
    diff = commands.add_parser("diff", help="compare two results.json: metadata, then changed cells")
    diff.add_argument("old", type=Path)
    diff.add_argument("new", type=Path)
    history = commands.add_parser(
        "history", help="the published tables across torch versions: HISTORY.md and the index page"
    )
    history.add_argument(
        "results", type=Path, nargs="+", help="each published table: its results.json(.gz) or its folder"
    )
    history.add_argument("-o", "--output", type=Path, default=Path("reports/HISTORY.md"))
    history.add_argument("--index", type=Path, default=Path("reports/index.html"))
    history.add_argument("--findings", type=Path, help="findings data (default: reports/findings.toml)")
    history.add_argument(
        "--update-findings",
        action="store_true",
        help="set each finding's torch versions in the findings data from these tables",
    )
    from conformance.versions import crossversion, libraries, publish, reproduce

    # the commands that live in a module of their own: (module, its run function, help)
    modules = {
        "libraries": (
            libraries,
            libraries.main,
            "the pip commands that install the checkpoint libraries beside this torch (--install runs them)",
        ),
        "crossversion": (
            crossversion,
            crossversion.crossversion,
            "save with one torch version, load with another: the grid under reports/crossversion/",
        ),
        "reproduce": (
            reproduce,
            reproduce.main,
            "run the findings' standalone scripts and record those that reproduce (reports/findings/verified.json)",
        ),
        "publish": (
            publish,
            publish.publish,
            "run the matrix in a torch version's cached venv and publish its table under reports/",
        ),
    }
    for name, (module, _, help_text) in modules.items():
        module.add_arguments(
            commands.add_parser(
                name,
                help=help_text,
                description=module.__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    args = parser.parse_args(argv)
    if args.command == "render":
        args.results = results_file(args.results)
    if args.command == "diff":
        return _diff(args.old, args.new)
    if args.command in modules:
        return modules[args.command][1](args)
    if args.command == "history":
        return _history(args.results, args.output, args.index, args.findings, args.update_findings)
    try:
        environment, cells = read_results(args.results)
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read {args.results}: {exc}", file=sys.stderr)
        return 2
    from conformance.baseline import known_failures, load_baseline
    from conformance.report.html import render_html

    try:
        known = known_failures(cells, load_baseline(args.baseline)) if args.baseline else {}
    except (OSError, ValueError) as exc:
        print(f"cannot read the baseline: {exc}", file=sys.stderr)
        return 2

    from conformance.findings import load_findings
    from conformance.report.findings_md import render_findings

    try:
        findings = load_findings(args.findings) if args.findings else load_findings()
    except (OSError, ValueError) as exc:
        print(f"cannot read the findings: {exc}", file=sys.stderr)
        return 2
    from conformance.report.rules import folded_into

    if args.fold and not environment.get("unsupported"):  # folded once already: never twice
        cells += _declared_unsupported(environment, {c.id for c in cells})
    environment, cells = folded_into(environment, cells)  # unsupported rows of an older run: rules
    if args.na:
        from conformance.report.applicable import with_not_applicable

        environment = with_not_applicable(environment, cells)
    if args.fold or args.na:
        from conformance.report.results import results_document, write_results

        target = args.results
        if (args.gzip or args.results.suffix == GZIPPED) and target.suffix != GZIPPED:
            target = target.with_name(target.name + GZIPPED)
        write_results(target, results_document(environment, cells))
        if target != args.results:
            args.results.unlink()
        args.results = target
    if "strategy_descriptions" not in environment:  # results written before the run recorded them
        environment["strategy_descriptions"] = _descriptions(environment.get("strategies", {}))
    out = args.output or args.results.with_name("matrix.md")
    ordered = sorted(cells, key=lambda c: c.id)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_markdown(environment, ordered, known, findings))
    page = out.with_suffix(".html")
    page.write_text(render_html(environment, ordered, known, findings))
    written = [out, page]
    if findings:
        written.append(out.with_name("FINDINGS.md"))
        written[-1].write_text(render_findings(environment, ordered, findings))
    print(f"wrote {', '.join(map(str, written))} ({len(cells)} cells)")
    return 0


def _history(
    paths: list[Path], output: Path, index: Path, findings_path: Path | None, update_findings: bool
) -> int:
    from conformance.findings import FINDINGS_PATH, load_findings
    from conformance.report.history import Published, histories, update_finding_versions
    from conformance.report.history_page import render_history_markdown, render_index_html

    tables = []
    for path in paths:
        try:
            environment, cells = read_results(path)
        except (OSError, ValueError, KeyError) as exc:
            print(f"cannot read {path}: {exc}", file=sys.stderr)
            return 2
        tables.append(Published(results_file(path), environment, cells))
    findings = load_findings(findings_path) if findings_path else load_findings()
    series = histories(tables, findings)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_history_markdown(series))
    index.write_text(render_index_html(tables, series, index))
    print(f"wrote {output} and {index}: {len(tables)} tables in {len(series)} series")
    if update_findings:
        target = findings_path or FINDINGS_PATH
        target.write_text(update_finding_versions(target.read_text(), tables, findings))
        print(f"updated the torch versions of each finding in {target}")
    return 0


def _descriptions(names: dict[str, object]) -> dict[str, str]:
    """What the installed registered strategies of these names say they run (render of an older
    results.json): the entry points', where they load."""
    from conformance.strategy.registry import build_registry

    try:
        known = build_registry([]).descriptions()
    except Exception:  # an entry point that does not load: no descriptions, the tables still render
        return {}
    return {name: text for name, text in known.items() if name in names}


def _declared_unsupported(environment: dict[str, Any], ran: set[str]) -> list[CellResult]:
    """A covering profile's table: the unsupported cells of its declaration, from this suite's
    matrix and the strategies the table ran, as the run folds them (plugin.results)."""
    from conformance.matrix import PROFILES
    from conformance.matrix.cells import declared_unsupported
    from conformance.strategy.registry import build_registry

    if str(environment.get("matrix")) not in PROFILES:
        return []
    registry = build_registry(["builtin", *sorted(environment.get("strategies") or {})])
    return declared_unsupported(registry, str(environment["matrix"]), str(environment.get("backend")), ran)


def _diff(old_path: Path, new_path: Path) -> int:
    from conformance.report.diff import diff_runs, render_diff

    try:
        old_env, old = read_results(old_path)
        new_env, new = read_results(new_path)
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read results: {exc}", file=sys.stderr)
        return 2
    from conformance.report.rules import folded_into, render_rule_changes

    old_env, old = folded_into(old_env, old)  # an older run's unsupported rows: counted per rule
    new_env, new = folded_into(new_env, new)
    diff = diff_runs(old, new)

    left = render_rule_changes(old_env, old, new_env, new) or None
    if diff.removed:
        from conformance.findings import load_findings
        from conformance.report.left import render_left, why_left

        left = (left or []) + render_left(why_left(diff.removed, new, load_findings()))
    print(render_diff(old_env, new_env, diff, left), end="")
    return 1 if diff.regressed else 0


if __name__ == "__main__":
    sys.exit(main())

"""python -m conformance render RESULTS.json [-o matrix.md]: the Markdown matrix from results alone."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.report.markdown import render_markdown
from conformance.report.results import read_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="write matrix.md from a results.json (no re-run)")
    render.add_argument("results", type=Path)
    render.add_argument("-o", "--output", type=Path, help="default: matrix.md beside the results")
    args = parser.parse_args(argv)
    try:
        environment, cells = read_results(args.results)
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read {args.results}: {exc}", file=sys.stderr)
        return 2
    out = args.output or args.results.with_name("matrix.md")
    out.write_text(render_markdown(environment, sorted(cells, key=lambda c: c.id)))
    print(f"wrote {out} ({len(cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

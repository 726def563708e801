"""Known outcomes: a TOML file keyed by cell id, so a run fails on regressions only.

    ["fsdp2-dsd_full-dcp-adamw-mlp-w2"]
    outcome = "fail"
    reason = "get/set_state_dict returns AdamW betas as a list"

A cell whose outcome equals its entry is reported as xfail with the reason; a cell listed
with a non-pass outcome that now passes is reported as stale (a warning, not a failure).
`--update-baseline` writes the file from a run: every cell that did not pass, with the first
line of its detail as the reason.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from conformance.outcome import FAILING, CellResult, Outcome

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Expectation:
    outcome: Outcome
    reason: str
    link: str = ""


def load_baseline(path: Path) -> dict[str, Expectation]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"baseline file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"baseline file {path} is not valid TOML: {exc}") from None
    out = {}
    for cell_id, entry in data.items():
        if not isinstance(entry, dict) or "outcome" not in entry:
            raise ValueError(f'{path}: entry [{cell_id!r}] needs an outcome = "..." line')
        try:
            outcome = Outcome(entry["outcome"])
        except ValueError:
            raise ValueError(
                f"{path}: [{cell_id!r}] outcome {entry['outcome']!r} is not one of {[o.value for o in Outcome]}"
            ) from None
        out[cell_id] = Expectation(outcome, str(entry.get("reason", "")), str(entry.get("link", "")))
    return out


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def render_baseline(results: list[CellResult], header: str) -> str:
    """A baseline TOML of every cell that failed, errored, crashed or hung in a run."""
    from conformance.report.markdown import first_line

    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for result in sorted(results, key=lambda r: r.id):
        if result.outcome in FAILING:
            lines += [
                "",
                f"[{_toml_string(result.id)}]",
                f"outcome = {_toml_string(result.outcome.value)}",
                f"reason = {_toml_string(first_line(result.detail))}",
            ]
    return "\n".join(lines) + "\n"

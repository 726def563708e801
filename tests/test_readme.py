"""The README's commands as written: every `pytest cases ...` line collects cells from a fresh
checkout (the gate's example strategy included), and the main command's reports go where git
never tracks them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return [
        line.strip() for block in blocks for line in block.splitlines() if line.startswith("pytest cases")
    ]


def test_every_readme_matrix_command_collects_cells(tmp_path: Path) -> None:
    commands = _commands()
    assert any("--strategy examples.my_strategy:STRATEGY" in c for c in commands), commands
    for command in commands:
        args = command.split()[1:]
        args = [a for a in args if a not in ("--update-baseline",)]  # collection writes nothing
        if "--baseline" in args:  # the file the first gate command writes
            args[args.index("--baseline") + 1] = str(tmp_path / "my-baseline.toml")
            (tmp_path / "my-baseline.toml").write_text('profile = "ci"\npasses = []\n')
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *args, "--collect-only", "-q", "-p", "no:cacheprovider"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, f"{command}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        assert re.search(r"\d+ tests? collected", proc.stdout), f"{command}:\n{proc.stdout[-500:]}"


def test_the_main_command_writes_where_git_never_tracks() -> None:
    main = next(c for c in _commands() if "--matrix default" in c)
    assert "--report-dir" not in main, main
    folder = "reports/runs/torch-2.13.0-gloo-default/results.json"  # the plugin's default folder
    proc = subprocess.run(["git", "check-ignore", "-q", folder], cwd=ROOT)
    assert proc.returncode == 0, f"{folder} is not ignored by git"

"""A cached virtual environment per torch version: made once, then reused by every run that asks
for that version. torch first, pinned (an open range would pull another build), then what the
suite needs, and the adapters' frameworks unless asked not to, then the suite from the checkout
(editable, without dependencies) for its entry points, through which the adapters register.
Runs start in the checkout with it first on PYTHONPATH: the code that runs is the checkout's.

A version above a pip constraint of the machine (pip config's `constraint`) is installed with
the constraint lifted for that venv's installs (`PIP_CONSTRAINT=/dev/null`, an empty
constraint file: an empty PIP_CONSTRAINT left the configured one in force, pip 26.3), and
the progress says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.strategy.registry import ENTRY_POINT_GROUP
from conformance.versions.libraries import LIBRARY_PACKAGES, beside, pip_groups

SUITE_PACKAGES = ("numpy", "pytest>=7.4", "pytest-xdist>=3.3", "hypothesis>=6.80", "tabulate>=0.9")
ADAPTER_PACKAGES = ("lightning>=2.4", "accelerate>=1.0", "safetensors")


READY = ".conformance-ready.json"  # written last: a venv without it is half made and made again


def default_root() -> Path:
    """Where the venvs live: $CONFORMANCE_VENVS, else ~/.cache/fsdp-checkpoint-conformance/venvs."""
    env = os.environ.get("CONFORMANCE_VENVS")
    return Path(env) if env else Path.home() / ".cache" / "fsdp-checkpoint-conformance" / "venvs"


@dataclass(frozen=True)
class TorchVenv:
    """The venv of one torch version under `root` (torch-<version>)."""

    version: str
    root: Path

    @property
    def path(self) -> Path:
        return self.root / f"torch-{self.version}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def ready(self) -> dict[str, str] | None:
        """What it holds ({package: version}) when it was made completely, else None."""
        marker = self.path / READY
        if not (marker.exists() and self.python.exists()):
            return None
        try:
            return dict(json.loads(marker.read_text()))
        except (OSError, ValueError):
            return None


Say = Callable[[str], None]


def _stream(cmd: Sequence[str], say: Say, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `cmd`, printing each line of its output as it comes (pip's progress); returns its exit
    code and its last lines."""
    say("$ " + " ".join(cmd))
    tail: list[str] = []
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            say("  " + line.rstrip())
            tail = [*tail[-40:], line.rstrip()]
        code = proc.wait()
    return code, "\n".join(tail)


def _pip(
    venv: TorchVenv, args: Sequence[str], say: Say, env: dict[str, str] | None = None
) -> tuple[int, str]:
    return _stream([str(venv.python), "-m", "pip", "install", "--progress-bar", "off", *args], say, env)


def _ask(venv: TorchVenv, code: str) -> Any:
    """What the venv's python prints (JSON) for `code`, in isolated mode (-I): neither
    PYTHONPATH nor the working directory on its path, so that only the venv answers. A
    checkout's own `*.egg-info` on the path once made a venv without the suite look complete."""
    out = subprocess.run([str(venv.python), "-I", "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def installed(venv: TorchVenv) -> dict[str, str]:
    return dict(
        _ask(
            venv,
            "import importlib.metadata as m, json; "
            "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))",
        )
    )


def registered_strategies(venv: TorchVenv) -> list[str]:
    """The strategies the venv registers through entry points (the adapters')."""
    return list(
        _ask(
            venv,
            "import importlib.metadata as m, json; "
            f"print(json.dumps(sorted(e.name for e in m.entry_points(group={ENTRY_POINT_GROUP!r}))))",
        )
    )


class InstallError(RuntimeError):
    """A venv could not be made: the command, and what pip said last."""


def _install(venv: TorchVenv, packages: list[str], say: Say, env: dict[str, str] | None = None) -> None:
    """pip install `packages`; where the machine's pip constraint forbids them (a torch above
    its cap), once more with the constraint lifted for this install."""
    env = {**os.environ, **(env or {})}
    code, tail = _pip(venv, packages, say, env=env)
    if code and "constraint" in tail.lower():
        say(
            f"{' '.join(packages)}: outside this machine's pip constraint; again with PIP_CONSTRAINT={os.devnull}"
        )
        code, tail = _pip(venv, packages, say, env={**env, "PIP_CONSTRAINT": os.devnull})
    if code:
        raise InstallError(f"pip install {' '.join(packages)} exited {code}:\n{tail}")


SUITE = "fsdp-checkpoint-conformance"


def _torch(held: dict[str, str]) -> str:
    """The torch version of {package: version}, without its local part (2.13.0+cpu: 2.13.0)."""
    return held.get("torch", "").split("+")[0]


def checkout_strategies(checkout: Path) -> list[str]:
    """The strategies the checkout's pyproject.toml registers through entry points."""
    import tomllib

    project = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]
    return sorted(project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {}))


def _missing(venv: TorchVenv, held: dict[str, str], adapters: bool, checkout: Path | None = None) -> str:
    """What of the suite the venv itself lacks ("" when nothing), `held` being what it holds
    (installed(venv)): the suite's install, and with `adapters` the entry points through which
    the adapters register (all of the checkout's) and the checkpoint libraries of its torch."""
    if SUITE not in held:
        return "the venv does not hold the suite"
    if not adapters:
        return ""
    registered = registered_strategies(venv)
    if not registered:
        return "the venv registers no adapter through entry points"
    if checkout is not None:
        new = sorted(set(checkout_strategies(checkout)) - set(registered))
        if new:
            return f"the checkout registers strategies the venv does not ({', '.join(new)})"
    names = {name.replace("_", "-").replace(".", "-") for name in held}  # as PEP 503 normalizes them
    wanted = [lib.requirement for lib in beside(venv.version)]
    lacking = [
        dist for dist, lib in LIBRARY_PACKAGES.items() if lib.requirement in wanted and dist not in names
    ]
    if lacking:
        return f"the venv lacks the checkpoint libraries {', '.join(lacking)}"
    return ""


def ensure(venv: TorchVenv, checkout: Path, *, adapters: bool = True, say: Say = print) -> dict[str, str]:
    """The venv of `venv.version`, made if it is not there yet; returns {package: version}.
    The suite itself is installed from `checkout` without its dependencies (editable), for its
    entry points: the adapters' strategies register through them. Runs put the checkout first
    on PYTHONPATH, so the code that runs is always the checkout's."""
    start = time.monotonic()  # the whole of it: the check of a cached venv included
    now = installed(venv) if venv.python.exists() else {}
    marked = venv.ready()
    if marked is not None and _torch(marked) == venv.version:
        missing = _missing(venv, now, adapters, checkout)
        if not missing:
            say(f"venv {venv.path}: cached (torch {marked['torch']})")
            return marked
        say(f"venv {venv.path}: marked complete, but {missing}; installing it")
    if _torch(now) == venv.version:
        say(f"venv {venv.path}: torch {venv.version} there, completing what the suite needs")
    else:
        say(f"venv {venv.path}: making it for torch {venv.version}")
        venv.path.parent.mkdir(parents=True, exist_ok=True)
        code, tail = _stream([sys.executable, "-m", "venv", "--clear", str(venv.path)], say)
        if code:
            raise InstallError(f"python -m venv {venv.path} exited {code}:\n{tail}")
        _pip(venv, ["-q", "--upgrade", "pip"], say)
        _install(venv, [f"torch=={venv.version}"], say)
    # torch pinned again, so that nothing installed after it moves it
    frameworks = list(ADAPTER_PACKAGES) if adapters else []
    _install(venv, [*SUITE_PACKAGES, *frameworks, f"torch=={venv.version}"], say)
    for args, env in pip_groups(venv.version) if adapters else ():
        _install(venv, [*args, f"torch=={venv.version}"], say, env=env)
    _install(venv, ["--no-deps", "-e", str(checkout)], say)
    held = installed(venv)
    missing = _missing(venv, held, adapters, checkout)
    if missing:
        raise InstallError(
            f"{venv.path}: after `pip install -e {checkout}`, {missing}; a run there would publish "
            "a table without the adapters' rows"
        )
    (venv.path / READY).write_text(json.dumps(held, indent=1, sort_keys=True) + "\n")
    say(f"venv {venv.path}: torch {held.get('torch')} ready in {time.monotonic() - start:.0f} s")
    return held

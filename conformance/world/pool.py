"""The worlds of one pytest process: one live world per (backend, world size, slot), started
lazily. The slot keeps apart worlds that must not share processes: a resumed run goes to a
world that never ran the run it resumes.

A warm world is an optimisation, and a cell's outcome must not depend on it: a cell that hangs
in a world that had run other cells before it runs once more in a fresh world, and that run
is the cell's, led by a note of the first (CellRun.note) that the reports keep. A cell that hangs
in a fresh world is a hang (no second try); errors and crashes are never rerun, but for a rank
that died re-creating the warm world's process group before the cell began (the world's fault).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

from conformance.world import folders
from conformance.world.cellrun import CellRun
from conformance.world.launcher import ForkLauncher, Launcher, SpawnLauncher
from conformance.world.rank import CellFn
from conformance.world.world import World, WorldStartError


class CellPool(Protocol):
    """What runs a cell function on every rank of a world: the pool's warm worlds
    (`WorldPool`), or one torchrun per call (`world.torchrun.TorchrunPool`)."""

    root: Path  # a directory every world of the pool can reach

    def run(
        self,
        backend: str,
        size: int,
        fn: CellFn,
        arg: Any,
        *,
        timeout_s: float,
        seed: int = 0,
        slot: str = "",
    ) -> CellRun: ...


class WorldPool:
    """fresh: every run (every cell, every phase of a check) in a world of its own, closed
    after it (`--fresh-worlds`): the reference a warm world must agree with. Either way the
    ranks are forked from a template process that has imported torch and the cells' usual
    modules and done nothing else (conformance.world.template): a world starts in a fraction of
    a second, where spawned ranks each import torch again (about 2.5 s), which a warm world paid
    at every restart after a crash. spawn: the ranks spawned instead (`--spawn-worlds`), as
    warm worlds started before 2026-11-26."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        start_timeout_s: float = 120.0,
        fresh: bool = False,
        spawn: bool = False,
        preload: tuple[str, ...] = (),
        warm: tuple[str, ...] = (),
        launcher: Launcher | None = None,
    ) -> None:
        """launcher: how ranks start; by default forked from a template, or spawned (spawn).
        warm: modules the template imports if it can (the frameworks of the run's cells);
        spawned ranks import them on the first cell that needs them, as before."""
        self.root = folders.make(root)  # named with its owner; a dead owner's removed first
        self.start_timeout_s = start_timeout_s
        self.fresh = fresh
        self.preload = preload  # modules each rank imports once at start (World)
        if launcher is None:
            launcher = (
                SpawnLauncher()
                if spawn
                else ForkLauncher(self.root, preload, warm=warm, start_timeout_s=start_timeout_s)
            )
        self.launcher = launcher
        self._worlds: dict[tuple[str, int, str], World] = {}
        self.started = 0  # worlds started, restarts after a crash included
        folders.on_sigterm(self.terminate)  # SIGTERM: the worlds killed, the folder removed

    def world(self, backend: str, size: int, slot: str = "") -> World:
        key = (backend, size, slot)
        world = self._worlds.get(key)
        if world is None or not world.alive:
            self.started += 1
            world = World(
                backend,
                size,
                self.root,
                start_timeout_s=self.start_timeout_s,
                preload=self.preload,
                launcher=self.launcher,
            ).start()
            self._worlds[key] = world
        return world

    def run(
        self,
        backend: str,
        size: int,
        fn: CellFn,
        arg: Any,
        *,
        timeout_s: float,
        seed: int = 0,
        slot: str = "",
    ) -> CellRun:
        try:
            world = self.world(backend, size, slot)
        except WorldStartError as exc:
            return CellRun("harness-error", detail=f"world could not start: {exc}")
        earlier = world.cells_run
        run = world.run(fn, arg, timeout_s=timeout_s, seed=seed)
        if self.fresh:
            world.close()
        if not world.alive:
            self._worlds.pop((backend, size, slot), None)
        if run.before_cell:  # the world's fault: its process group could not be made again
            again = self.run(backend, size, fn, arg, timeout_s=timeout_s, seed=seed, slot=slot)
            note = (
                f"a rank died re-creating the warm world's process group after {earlier} other cells, "
                f"before the cell began (a fault of the world), then ran in a fresh world: {again.status}"
            )
            return dataclasses.replace(again, note=note, first_run=run.detail)
        if run.status != "hang" or not earlier:
            return run
        again = self.run(backend, size, fn, arg, timeout_s=timeout_s, seed=seed, slot=slot)
        note = (
            f"hung in a warm world after {earlier} other cells had run there, then ran in a fresh world: "
            f"{again.status} (the first run's stacks are at the end)"
        )
        return dataclasses.replace(again, note=note, first_run=run.detail)

    def close(self) -> None:
        for world in self._worlds.values():
            world.close()
        self._worlds.clear()
        self.launcher.close()
        folders.remove(self.root)

    def terminate(self) -> None:
        """What SIGTERM does: every world killed at once (no rank is asked to finish its cell),
        the template stopped, the folder removed."""
        for world in self._worlds.values():
            world.kill()
        self._worlds.clear()
        self.launcher.close()
        folders.remove(self.root)

    def __enter__(self) -> WorldPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Strategies for tests/test_shared_saves.py: the built-in one, but its checkpoint records
where it was written and its load reads from there, as a library that keeps an absolute path
in an index file would. A copy of such a checkpoint still reads the original. Factories are
module-level: cells pickle them by name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from conformance.case import Case
from conformance.layout.builtin import builtin_strategy
from conformance.strategy.protocol import TrainState
from conformance.world import RankContext
from tests.broken import Delegating

INDEX = "written_at.txt"


@dataclass
class NamesItsFolder(Delegating):
    """Saves as the built-in strategy, then writes its own path into the checkpoint; loads from
    the path it finds there."""

    def save(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.base.save(state, path, ctx)
        if ctx.rank == 0:
            (path / INDEX).write_text(str(path.resolve()))
        dist.barrier()

    def load(self, state: TrainState, path: Path, ctx: RankContext) -> None:
        self.base.load(state, Path((path / INDEX).read_text()), ctx)


def names_its_folder(case: Case) -> NamesItsFolder:
    return NamesItsFolder(builtin_strategy(case))

"""Worlds: persistent, fault-isolating process groups that run cells on every rank."""

from conformance.world.cellrun import CellRun, with_reruns
from conformance.world.context import RankContext
from conformance.world.pool import CellPool, WorldPool
from conformance.world.world import World, WorldStartError

__all__ = ["CellPool", "CellRun", "RankContext", "World", "WorldPool", "WorldStartError", "with_reruns"]

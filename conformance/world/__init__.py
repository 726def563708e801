"""Worlds: persistent, fault-isolating process groups that run cells on every rank."""

from conformance.world.context import RankContext
from conformance.world.pool import CellPool, WorldPool
from conformance.world.world import CellRun, World, WorldStartError

__all__ = ["CellPool", "CellRun", "RankContext", "World", "WorldPool", "WorldStartError"]

"""Worlds: persistent, fault-isolating process groups that run cells on every rank."""

from conformance.world.context import RankContext
from conformance.world.pool import WorldPool
from conformance.world.world import CellRun, World, WorldStartError

__all__ = ["CellRun", "RankContext", "World", "WorldPool", "WorldStartError"]

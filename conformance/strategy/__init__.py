"""The thing under test: a strategy wraps a model, saves model plus optimizer, loads them back.

One protocol (`Strategy`); the built-in strategies are composed from three small parts, each
with one job: a `Wrapper` (DDP, FSDP1, FSDP2), a `StateApi` (how the state dict is taken and
put back), and a `Storage` (how it reaches the disk). Yours, or a framework's, is registered
with a `RegisteredStrategy` that declares what it `Supports` (registry.py).
"""

from conformance.strategy.protocol import StateApi, Storage, Strategy, TrainState, Wrapper
from conformance.strategy.registry import RegisteredStrategy, Supports

__all__ = ["RegisteredStrategy", "StateApi", "Storage", "Strategy", "Supports", "TrainState", "Wrapper"]

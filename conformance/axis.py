"""An axis whose values are objects registered in one place (conformance.optim, conformance.precision):
the values by name, and the modules outside the package that registered one, which every rank
imports before a cell (runner.rank_preload) so that it finds the value too."""

from __future__ import annotations

import sys
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


V = TypeVar("V", bound=Named)


def available() -> str | None:
    """The default `unavailable` of an axis value: nothing this torch lacks."""
    return None


class Axis(Generic[V]):
    """values: name -> value, the registry itself (read, and in tests patched, as a dict)."""

    def __init__(self, kind: str, values: tuple[V, ...]) -> None:
        self.kind = kind
        self.values: dict[str, V] = {value.name: value for value in values}
        self._modules: dict[str, str] = {}  # name -> the module that registered it

    def register(self, value: V) -> V:
        """Adds a value (or replaces the one of its name) and remembers the calling module; returns
        it. Call it directly from the registering module (the caller's frame names the module)."""
        self.values[value.name] = value
        self._modules[value.name] = sys._getframe(1).f_globals.get("__name__", "")
        return value

    def of(self, name: str) -> V:
        """The value of that name, or the error for a name no value has."""
        try:
            return self.values[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str, also: str = "") -> ValueError:
        """The error for a name no value has."""
        return ValueError(
            f"unknown {self.kind} {name!r}; known: {sorted(self.values)}{also} (a plugin's {self.kind}: "
            "register it in a module pytest imports, -p your.module)"
        )

    def plugin_modules(self) -> tuple[str, ...]:
        """The modules outside this package that registered a value: each rank imports them."""
        return tuple(sorted({m for m in self._modules.values() if m and not m.startswith("conformance.")}))

"""The bitwise comparer: exact key sets, then per key: type, dtype, shape, and every bit.

Floating tensors are compared through an integer view of their bits, which is stricter than
torch.equal (it tells -0.0 from 0.0) and treats equal NaNs as equal. Non-tensor values must
have the same type (a tuple that comes back as a list is reported as type drift) and equal
values; floats compare by their bits too. Never allclose.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import torch

from conformance.observed import Observed

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class ForeignMesh:
    """What the harness's snapshot holds in place of a DTensor whose device mesh is not of the
    world it is in (a load left state on the saving world's mesh): its value cannot be read, nor
    stepped, here. mesh: the mesh as DeviceMesh prints it; world_size: the world it was found in;
    why: what does not fit (ranks the world lacks, a process group of another size)."""

    mesh: str
    world_size: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    why: str

    def __str__(self) -> str:
        return (
            f"a DTensor ({self.dtype}, shape {self.shape}) on {self.mesh}, not a mesh of this "
            f"{self.world_size}-rank world ({self.why})"
        )


@dataclass(frozen=True)
class Difference:
    """One difference: the key path, its kind (missing, unexpected, values, dtype, shape, type,
    length, value, or mesh: a DTensor left on a mesh that is not of this world), the message a
    person reads, and for values how many elements differ and the first differing index."""

    key: str
    message: str
    kind: str
    count: int | None = None
    index: tuple[int, ...] | None = None

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"

    def observed(self, scope: str, rank: int | None = None) -> Observed:
        """This difference as a record of the cell's result (conformance.observed)."""
        return Observed(scope, self.kind, self.key, rank, self.message, self.count, self.index)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        return t.view(_INT_VIEW[t.element_size()])
    return t


def _fmt(t: torch.Tensor) -> str:
    return f"{t.dtype}, shape {tuple(t.shape)}"


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim)
        flat //= dim
    return tuple(reversed(out))


def compare_tensors(expected: torch.Tensor, actual: torch.Tensor) -> str | None:
    """None when bitwise equal; else what differs, with the first differing index."""
    found = tensor_difference(expected, actual)
    return found.message if found else None


def tensor_difference(expected: torch.Tensor, actual: torch.Tensor, key: str = "") -> Difference | None:
    """None when bitwise equal; else the difference (dtype, shape, or values with their count
    and first differing index)."""
    if expected.dtype != actual.dtype:
        return Difference(key, f"dtype differs: expected {_fmt(expected)}, got {_fmt(actual)}", "dtype")
    if expected.shape != actual.shape:
        return Difference(key, f"shape differs: expected {_fmt(expected)}, got {_fmt(actual)}", "shape")
    a, b = _bits(expected), _bits(actual)
    if torch.equal(a, b):
        return None
    neq = a != b
    if expected.is_complex():  # the bits of (real, imag) pairs: one element differs if either does
        neq = neq.any(-1)
    positions = neq.reshape(-1).nonzero()
    first = int(positions[0])
    idx = _index(first, expected.shape) if expected.dim() else ()
    e_val = expected.detach().cpu().reshape(-1)[first].item()
    a_val = actual.detach().cpu().reshape(-1)[first].item()
    message = (
        f"values differ ({_fmt(expected)}): {len(positions)} of {expected.numel()} elements; "
        f"first at index {idx}: expected {e_val!r}, got {a_val!r}"
    )
    return Difference(key, message, "values", len(positions), idx)


def _float_bits(x: float) -> bytes:
    return struct.pack("<d", x)


def compare_values(expected: Any, actual: Any, key: str = "") -> list[Difference]:
    """Every difference between two values, recursing into dicts, lists and tuples."""
    if isinstance(actual, ForeignMesh):
        return [Difference(key, f"loaded onto a foreign mesh: {actual}", "mesh")]
    if isinstance(expected, ForeignMesh):
        return [Difference(key, f"the reference state is on a foreign mesh: {expected}", "mesh")]
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return [
                Difference(
                    key,
                    f"type differs: expected {type(expected).__name__}, got {type(actual).__name__}",
                    "type",
                )
            ]
        found = tensor_difference(expected, actual, key)
        return [found] if found else []
    if type(expected) is not type(actual):
        return [
            Difference(
                key,
                f"type drift: expected {type(expected).__name__} {expected!r}, "
                f"got {type(actual).__name__} {actual!r}",
                "type",
            )
        ]
    if isinstance(expected, dict):
        return compare_states(expected, actual, prefix=f"{key}." if key else "")
    if isinstance(expected, (list, tuple)):
        if len(expected) != len(actual):
            return [Difference(key, f"length differs: expected {len(expected)}, got {len(actual)}", "length")]
        out: list[Difference] = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += compare_values(e, a, f"{key}[{i}]")
        return out
    if isinstance(expected, float):
        same = _float_bits(expected) == _float_bits(actual) or (math.isnan(expected) and math.isnan(actual))
    else:
        same = expected == actual
    return [] if same else [Difference(key, f"expected {expected!r}, got {actual!r}", "value")]


def compare_states(expected: dict[str, Any], actual: dict[str, Any], prefix: str = "") -> list[Difference]:
    """Compare two flat or nested state dicts: missing keys, extra keys, then every value."""
    out: list[Difference] = []
    missing = sorted(set(expected) - set(actual), key=str)
    extra = sorted(set(actual) - set(expected), key=str)
    for key in missing:
        out.append(Difference(f"{prefix}{key}", "missing after load", "missing"))
    for key in extra:
        out.append(
            Difference(f"{prefix}{key}", "unexpected key after load (not in the saved state)", "unexpected")
        )
    for key in sorted(set(expected) & set(actual), key=str):
        out += compare_values(expected[key], actual[key], f"{prefix}{key}")
    return out


def first_of_each_kind(differences: list[Difference]) -> list[Difference]:
    """The same differences, the first of each kind moved to the front (so a report that
    shows only the first few still shows every kind: missing keys and differing values)."""
    seen: set[str] = set()
    firsts, rest = [], []
    for d in differences:
        (rest if d.kind in seen else firsts).append(d)
        seen.add(d.kind)
    return firsts + rest

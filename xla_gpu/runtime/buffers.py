"""Where a whole program's values live at run time: allocations and slices
of them. numpy only (a saved program is run by `xla_gpu.runtime` alone).

Buffer assignment (compile time) produces these; thunks (run time) take
their arguments as slices and resolve them against the allocations of one
execution (host byte arrays on the cpu target, device pointers on cuda).

    Allocation(index=0, size=4096, kind="parameter", parameter=0)
    Allocation(index=3, size=1 << 20, kind="temp")           # one per program
    BufferSlice(allocation=3, offset=256, size=1024)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ALLOCATION_KINDS", "Allocation", "BufferSlice"]

# parameter: an entry parameter's leaf (the caller's array, or a copy of it);
# output: an entry output leaf that is not a parameter; temp: the one packed
# allocation of every temporary; constant: a literal stored in the
# executable; thread_local: scratch that no thunk shares (e.g. a sort's keys).
ALLOCATION_KINDS = ("parameter", "output", "temp", "constant", "thread_local")


@dataclass(frozen=True)
class Allocation:
    index: int
    size: int                           # bytes
    kind: str                           # one of ALLOCATION_KINDS
    parameter: int | None = None        # kind == "parameter": its number
    parameter_index: tuple[int, ...] = ()   # the leaf of a tuple parameter
    output_index: tuple[int, ...] | None = None   # also an entry output leaf
    constant: str | None = None         # kind == "constant": the instruction
    alignment: int = 64                 # bytes; XLA:GPU aligns to 64 or more

    def __post_init__(self):
        if self.kind not in ALLOCATION_KINDS:
            raise ValueError(f"allocation kind must be one of {ALLOCATION_KINDS}, "
                             f"got {self.kind!r}")
        if self.size < 0:
            raise ValueError(f"allocation {self.index}: negative size {self.size}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "Allocation":
        data = dict(data)
        data["parameter_index"] = tuple(data.get("parameter_index", ()))
        if data.get("output_index") is not None:
            data["output_index"] = tuple(data["output_index"])
        return Allocation(**data)


@dataclass(frozen=True)
class BufferSlice:
    """`size` bytes at `offset` in allocation `allocation`."""
    allocation: int
    offset: int
    size: int

    def __post_init__(self):
        if self.offset < 0 or self.size < 0:
            raise ValueError(f"buffer slice with negative offset or size: {self}")

    def overlaps(self, other: "BufferSlice") -> bool:
        return self.allocation == other.allocation and \
            self.offset < other.offset + other.size and \
            other.offset < self.offset + self.size

    def to_list(self) -> list[int]:
        return [self.allocation, self.offset, self.size]

    @staticmethod
    def from_list(data) -> "BufferSlice":
        allocation, offset, size = (int(v) for v in data)
        return BufferSlice(allocation, offset, size)

    def __str__(self) -> str:
        return f"{{alloc:{self.allocation}, offset:{self.offset}, size:{self.size}}}"

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
from functools import cached_property
from typing import Any

import numpy as np

from ..hlo.shape import ELEMENT_TYPES

__all__ = ["ALLOCATION_KINDS", "Allocation", "BufferSlice", "ArrayRef", "TOKEN_TYPE",
           "token_ref", "token_value"]

# XLA's token: it orders side effects and holds no bytes, so no allocation
# has one. An entry parameter or output leaf of this type is a token ref
# (`token_ref()`); a run ignores the argument given for it and returns
# `token_value()` in its place, as the interpreter does.
TOKEN_TYPE = "token"

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
    # 0: the device's memory; 5 (XLA's host memory space): the host's, for
    # the values a program offloads (kind "temp"; pinned memory on cuda).
    memory_space: int = 0

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


_SUB_BYTE_STORAGE = {"s2": np.dtype(np.int8), "s4": np.dtype(np.int8),
                     "u2": np.dtype(np.uint8), "u4": np.dtype(np.uint8)}


@dataclass(frozen=True)
class ArrayRef:
    """An array living in a buffer slice: element type, logical dims and
    layout (minor-to-major, None = row-major). The bytes are in the
    physical order the layout gives, as XLA keeps them; sub-byte integers
    take one byte per element (as the kernels store them)."""
    slice: BufferSlice
    element_type: str
    dims: tuple[int, ...]
    layout: tuple[int, ...] | None = None

    @property
    def is_token(self) -> bool:
        return self.element_type == TOKEN_TYPE

    # Derived values are cached on the instance (thunks read them every run).
    @cached_property
    def dtype(self) -> np.dtype:
        """The dtype users see (ml_dtypes for bf16, int4...)."""
        return ELEMENT_TYPES[self.element_type]

    @cached_property
    def storage_dtype(self) -> np.dtype:
        return _SUB_BYTE_STORAGE.get(self.element_type, self.dtype)

    @cached_property
    def num_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @cached_property
    def nbytes(self) -> int:
        return self.num_elements * self.storage_dtype.itemsize

    @cached_property
    def major_to_minor(self) -> tuple[int, ...]:
        if self.layout is None:
            return tuple(range(len(self.dims)))
        return tuple(reversed(self.layout))

    @cached_property
    def is_row_major(self) -> bool:
        return self.major_to_minor == tuple(range(len(self.dims)))

    @cached_property
    def physical_dims(self) -> tuple[int, ...]:
        return tuple(self.dims[d] for d in self.major_to_minor)

    @cached_property
    def _to_logical(self) -> tuple[int, ...]:
        order = self.major_to_minor
        return tuple(order.index(d) for d in range(len(self.dims)))

    def logical_from_physical(self, physical: np.ndarray) -> np.ndarray:
        """The logical view of an array in physical order (no copy)."""
        if self.is_row_major:
            return physical
        return physical.transpose(self._to_logical)

    def physical_from_logical(self, logical: np.ndarray) -> np.ndarray:
        """`logical` rearranged into physical order (a view)."""
        if self.is_row_major:
            return logical
        return logical.transpose(self.major_to_minor)

    def describe(self) -> str:
        text = f"{self.element_type}[{','.join(map(str, self.dims))}]"
        if self.layout is not None and not self.is_row_major:
            text += "{" + ",".join(map(str, self.layout)) + "}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"slice": self.slice.to_list(), "type": self.element_type,
                "dims": list(self.dims),
                "layout": None if self.layout is None else list(self.layout)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "ArrayRef":
        element_type = str(data["type"])
        if element_type != TOKEN_TYPE and element_type not in ELEMENT_TYPES:
            raise ValueError(f"unknown element type '{element_type}'")
        return ArrayRef(BufferSlice.from_list(data["slice"]), element_type,
                        tuple(int(d) for d in data["dims"]),
                        None if data.get("layout") is None
                        else tuple(int(d) for d in data["layout"]))


def token_ref() -> ArrayRef:
    """The ref of an entry leaf of token type: no allocation (-1), no bytes."""
    return ArrayRef(BufferSlice(-1, 0, 0), TOKEN_TYPE, ())


def token_value() -> np.ndarray:
    """What a run returns for a token output (an empty byte array, the
    interpreter's token value)."""
    return np.zeros((0,), np.uint8)

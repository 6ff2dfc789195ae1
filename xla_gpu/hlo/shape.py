"""HLO element types and shapes, mapped to numpy (bf16/f8 through ml_dtypes).

This module imports only numpy and ml_dtypes: compiled kernels run where no
compiler is installed."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import ml_dtypes
import numpy as np

__all__ = ["ELEMENT_TYPES", "Shape", "numpy_dtype", "bit_width", "is_float",
           "is_signed_int", "is_unsigned_int", "is_integral", "is_complex",
           "default_layout", "same_shape"]

# HLO element type name -> numpy dtype. Sub-byte integers are held unpacked,
# one element per byte, in the ml_dtypes types of that width.
ELEMENT_TYPES: dict[str, np.dtype] = {
    "pred": np.dtype(np.bool_),
    "s2": np.dtype(ml_dtypes.int2), "s4": np.dtype(ml_dtypes.int4),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16),
    "s32": np.dtype(np.int32), "s64": np.dtype(np.int64),
    "u2": np.dtype(ml_dtypes.uint2), "u4": np.dtype(ml_dtypes.uint4),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e4m3b11fnuz": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "f8e3m4": np.dtype(ml_dtypes.float8_e3m4),
    # 4-bit float (1 sign, 2 exponent, 1 mantissa bits; no inf or NaN),
    # held one element per byte as the sub-byte integers are.
    "f4e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}

_BITS = {"pred": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "f4e2m1fn": 4}


def numpy_dtype(element_type: str) -> np.dtype:
    return ELEMENT_TYPES[element_type]


def bit_width(element_type: str) -> int:
    """Bits of one element as XLA stores it (pred: 1, s4: 4, c64: 64)."""
    return _BITS.get(element_type, ELEMENT_TYPES[element_type].itemsize * 8)


def is_float(t: str) -> bool:
    return t.startswith(("f", "bf"))


def is_complex(t: str) -> bool:
    return t.startswith("c")


def is_signed_int(t: str) -> bool:
    return t.startswith("s")


def is_unsigned_int(t: str) -> bool:
    return t.startswith("u")


def is_integral(t: str) -> bool:
    return t == "pred" or is_signed_int(t) or is_unsigned_int(t)


def default_layout(rank: int) -> tuple[int, ...]:
    """XLA's default layout (minor-to-major): row-major, the last dimension
    minor."""
    return tuple(range(rank - 1, -1, -1))


@dataclass(frozen=True)
class Shape:
    """An array shape (`f32[2,3]{1,0}`) or a tuple of shapes (`(f32[2], s32[])`).

    `layout` is minor-to-major as printed; None when the text had none (XLA's
    default, row-major)."""
    element_type: str = ""
    dims: tuple[int, ...] = ()
    layout: tuple[int, ...] | None = None
    tuple_shapes: tuple["Shape", ...] | None = field(default=None)

    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        return prod(self.dims)

    @property
    def dtype(self) -> np.dtype:
        return ELEMENT_TYPES[self.element_type]

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        """The layout, XLA's default (row-major) one when there is none."""
        return tuple(self.layout) if self.layout is not None else default_layout(self.rank)

    @property
    def major_to_minor(self) -> tuple[int, ...]:
        """The dimensions from the slowest-varying in memory to the fastest."""
        return self.minor_to_major[::-1]

    @property
    def is_row_major(self) -> bool:
        return self.layout is None or tuple(self.layout) == default_layout(self.rank)

    def physical_shape(self) -> "Shape":
        """The array whose row-major order is this one's memory order: the
        dimensions in major-to-minor order, no layout."""
        return Shape(self.element_type, tuple(self.dims[d] for d in self.major_to_minor))

    def physical_from_logical(self, array: np.ndarray) -> np.ndarray:
        """`array` (this shape's logical dims) with its axes in memory order,
        the dims of `physical_shape()` (a view)."""
        return array if self.is_row_major else np.transpose(array, self.major_to_minor)

    def logical_from_physical(self, array: np.ndarray) -> np.ndarray:
        """An array in memory order (the dims of `physical_shape()`) with its
        axes in logical order (a view)."""
        if self.is_row_major:
            return array
        return np.transpose(array, np.argsort(self.major_to_minor))

    def leaves(self) -> list["Shape"]:
        """The array shapes, depth first (itself when not a tuple)."""
        if not self.is_tuple:
            return [self]
        return [leaf for s in self.tuple_shapes for leaf in s.leaves()]

    def with_dims(self, dims, element_type: str | None = None) -> "Shape":
        return Shape(element_type or self.element_type, tuple(dims), None)

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        text = f"{self.element_type}[{','.join(map(str, self.dims))}]"
        if self.layout is not None:
            text += "{" + ",".join(map(str, self.layout)) + "}"
        return text


def same_shape(a: Shape, b: Shape, layouts: bool = True) -> bool:
    """Equal shapes, tuples element by element; a missing layout is the
    default one, and `layouts=False` compares element types and dimensions
    only."""
    if a.is_tuple or b.is_tuple:
        return a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes) \
            and all(same_shape(x, y, layouts) for x, y in zip(a.tuple_shapes, b.tuple_shapes))
    if a.element_type != b.element_type or tuple(a.dims) != tuple(b.dims):
        return False
    return not layouts or a.element_type == "token" or a.minor_to_major == b.minor_to_major

"""HLO element types and shapes, mapped to numpy (bf16/f8 through ml_dtypes).

This module imports only numpy, and ml_dtypes when one of its types is
asked for: compiled kernels run where no compiler is installed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache, wraps
from math import prod

import numpy as np

__all__ = ["ELEMENT_TYPES", "Shape", "numpy_dtype", "bit_width", "is_float",
           "is_signed_int", "is_unsigned_int", "is_integral", "is_complex",
           "default_layout", "same_shape", "per_shape"]

# HLO element type name -> the numpy type, or the name of the ml_dtypes type
# (a str). Sub-byte integers are held unpacked, one element per byte, in the
# ml_dtypes types of that width.
_TYPES: dict[str, type | str] = {
    "pred": np.bool_,
    "s2": "int2", "s4": "int4",
    "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
    "u2": "uint2", "u4": "uint4",
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "f16": np.float16, "bf16": "bfloat16",
    "f32": np.float32, "f64": np.float64,
    "f8e5m2": "float8_e5m2", "f8e4m3fn": "float8_e4m3fn",
    "f8e4m3b11fnuz": "float8_e4m3b11fnuz", "f8e5m2fnuz": "float8_e5m2fnuz",
    "f8e4m3fnuz": "float8_e4m3fnuz", "f8e4m3": "float8_e4m3", "f8e3m4": "float8_e3m4",
    # 8 exponent bits and nothing else (MX block scales): the powers of two
    # 2^-127 .. 2^127, and NaN; no sign, zero or infinity.
    "f8e8m0fnu": "float8_e8m0fnu",
    # 4-bit float (1 sign, 2 exponent, 1 mantissa bits; no inf or NaN),
    # held one element per byte as the sub-byte integers are.
    "f4e2m1fn": "float4_e2m1fn",
    "c64": np.complex64, "c128": np.complex128,
}


class _ElementTypes(Mapping):
    """HLO element type name -> numpy dtype (`ELEMENT_TYPES`). ml_dtypes
    is imported when one of its types is first looked up, not before:
    importing it registers its ufunc loops one by one (about a second with
    numpy 2), which a program of numpy's own types never needs."""

    def __init__(self) -> None:
        self._dtypes = {name: np.dtype(t) for name, t in _TYPES.items()
                        if not isinstance(t, str)}

    def __getitem__(self, name: str) -> np.dtype:
        try:
            return self._dtypes[name]
        except KeyError:
            pass
        ml_name = _TYPES[name]          # KeyError: not an element type
        import ml_dtypes
        dtype = self._dtypes[name] = np.dtype(getattr(ml_dtypes, ml_name))
        return dtype

    def __contains__(self, name: object) -> bool:
        return name in _TYPES

    def __iter__(self) -> Iterator[str]:
        return iter(_TYPES)

    def __len__(self) -> int:
        return len(_TYPES)

    def __repr__(self) -> str:
        return f"ELEMENT_TYPES({list(_TYPES)})"


ELEMENT_TYPES: Mapping[str, np.dtype] = _ElementTypes()

# Where the bits are not the dtype's: pred and the sub-byte types; and the
# ml_dtypes types (their width known without importing it).
_BITS = {"pred": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "f4e2m1fn": 4, "bf16": 16,
         **{name: 8 for name in _TYPES if name.startswith("f8")}}


def numpy_dtype(element_type: str) -> np.dtype:
    return ELEMENT_TYPES[element_type]


def bit_width(element_type: str) -> int:
    """Bits of one element as XLA stores it (pred: 1, s4: 4, c64: 64)."""
    bits = _BITS.get(element_type)
    return bits if bits is not None else ELEMENT_TYPES[element_type].itemsize * 8


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


# XLA's memory space of host memory (`f32[4]{0:S(5)}`).
HOST_MEMORY_SPACE = 5


def default_layout(rank: int) -> tuple[int, ...]:
    """XLA's default layout (minor-to-major): row-major, the last dimension
    minor."""
    return tuple(range(rank - 1, -1, -1))


def per_shape(function):
    """`function(shape, *flags)` remembered by its arguments (bounded): the
    passes, the printer and the kernel keys ask the same few shapes of a
    program tens of thousands of times for their text or size. Arguments
    that cannot be hashed (a shape built with a list for its dims) are
    passed through without the table."""
    remembered = lru_cache(maxsize=1 << 16)(function)

    @wraps(function)
    def call(*args):
        try:
            return remembered(*args)
        except TypeError:
            return function(*args)
    return call


@dataclass(frozen=True)
class Shape:
    """An array shape (`f32[2,3]{1,0}`) or a tuple of shapes (`(f32[2], s32[])`).

    `layout` is minor-to-major as printed; None when the text had none (XLA's
    default, row-major). `memory_space`: where the array lives, XLA's
    layout memory space: 0 the device's memory, HOST_MEMORY_SPACE (5, printed
    `{0:S(5)}`) the host's, where a program offloads a value it needs back
    later."""
    element_type: str = ""
    dims: tuple[int, ...] = ()
    layout: tuple[int, ...] | None = None
    tuple_shapes: tuple["Shape", ...] | None = field(default=None)
    memory_space: int = 0

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
        """The array shapes, depth first (itself when not a tuple). Without
        recursion: compiled (the package's Cython build) a recursive walk
        would overflow the C stack on a deep enough tuple, where the
        interpreter raises RecursionError."""
        if not self.is_tuple:
            return [self]
        found = []
        stack = [self]
        while stack:
            shape = stack.pop()
            if shape.tuple_shapes is None:
                found.append(shape)
            else:
                stack.extend(reversed(shape.tuple_shapes))
        return found

    def with_dims(self, dims, element_type: str | None = None) -> "Shape":
        return Shape(element_type or self.element_type, tuple(dims), None)

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        text = f"{self.element_type}[{','.join(map(str, self.dims))}]"
        if self.memory_space:
            order = self.layout if self.layout is not None else default_layout(self.rank)
            text += "{" + ",".join(map(str, order)) + f":S({self.memory_space})}}"
        elif self.layout is not None:
            text += "{" + ",".join(map(str, self.layout)) + "}"
        return text

    def in_memory_space(self, space: int) -> "Shape":
        """This array shape in memory space `space` (its layout kept)."""
        return Shape(self.element_type, self.dims, self.layout, None, space)


def same_shape(a: Shape, b: Shape, layouts: bool = True) -> bool:
    """Equal shapes, tuples element by element; a missing layout is the
    default one, and `layouts=False` compares element types and dimensions
    only. (Without recursion, as `Shape.leaves`.)"""
    pairs = [(a, b)]
    while pairs:
        a, b = pairs.pop()
        if a.is_tuple or b.is_tuple:
            if not (a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes)):
                return False
            pairs.extend(zip(reversed(a.tuple_shapes), reversed(b.tuple_shapes)))
            continue
        if a.element_type != b.element_type or tuple(a.dims) != tuple(b.dims):
            return False
        if layouts and a.element_type != "token" and (
                a.minor_to_major != b.minor_to_major or a.memory_space != b.memory_space):
            return False
    return True

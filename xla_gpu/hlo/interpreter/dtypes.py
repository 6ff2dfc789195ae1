"""What every part of the interpreter shares: the value type, the size
limit, and the element types values compute in (f16 / bf16 / f8 in f32,
f32 in f64, integers in int64 / uint64) and are rounded or wrapped back to."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..module import HloError, HloInstruction
from ..opcodes import SMALL_FLOAT_TYPES
from ..shape import ELEMENT_TYPES, bit_width


Value = Any  # np.ndarray or tuple of Values


# The most elements one value (an instruction's result, or a buffer an op
# builds on the way: a padded convolution input) may hold: values compute in
# 8-byte types, so this bounds a single array at 4 GiB. Checked before
# allocating, so that an oversized module is an error naming the
# instruction rather than a MemoryError deep inside numpy.
MAX_ELEMENTS = 1 << 29


def compute_dtype(etype: str) -> np.dtype:
    """The numpy type an op on `etype` computes in."""
    if etype == "pred":
        return np.dtype(np.bool_)
    if etype in SMALL_FLOAT_TYPES:
        return np.dtype(np.float32)
    if etype in ("f32", "f64"):
        return np.dtype(np.float64)
    if etype in ("c64", "c128"):
        return np.dtype(np.complex128)
    if etype[0] == "u":
        return np.dtype(np.uint64)
    return np.dtype(np.int64)


def is_float(etype: str) -> bool:
    return etype in SMALL_FLOAT_TYPES or etype in ("f32", "f64")


def is_int(etype: str) -> bool:
    return etype[0] in "su"


def int_limits(etype: str) -> tuple[int, int]:
    bits = bit_width(etype)
    if etype[0] == "u":
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def up(x: np.ndarray, etype: str) -> np.ndarray:
    """x (of type etype) in its compute type."""
    return np.asarray(x).astype(compute_dtype(etype), copy=False)


def wrap_int(x: np.ndarray, etype: str) -> np.ndarray:
    """Integers (int64/uint64 domain) wrapped to `etype`."""
    dtype = ELEMENT_TYPES[etype]
    bits = bit_width(etype)
    x = np.asarray(x)
    if bits >= 8:
        return x.astype(dtype)
    mask = (1 << bits) - 1
    low = x.astype(np.int64) & mask
    if etype[0] == "s":
        low = np.where(low >= (1 << (bits - 1)), low - (1 << bits), low)
    return low.astype(dtype)


def down(x: np.ndarray, etype: str) -> np.ndarray:
    """A value of the compute domain rounded / wrapped to `etype`."""
    if is_int(etype):
        return wrap_int(x, etype)
    if etype == "pred":
        return np.asarray(x).astype(np.bool_)
    return np.asarray(x).astype(ELEMENT_TYPES[etype])


def bits_unsigned(x: np.ndarray, etype: str) -> np.ndarray:
    """The bit patterns of integers of `etype` as uint64 (low `bits` bits)."""
    bits = bit_width(etype)
    v = np.asarray(x)
    if v.dtype.kind == "u":
        u = v.astype(np.uint64)
    else:
        u = v.astype(np.int64).view(np.uint64)
    if bits < 64:
        u = u & np.uint64((1 << bits) - 1)
    return u


def signed_of_bits(u: np.ndarray, bits: int) -> np.ndarray:
    """uint64 bit patterns of width `bits` as sign-extended int64."""
    s = u.astype(np.uint64).view(np.int64) if bits == 64 else \
        u.astype(np.int64)
    if bits < 64:
        s = np.where(s >= (1 << (bits - 1)), s - (1 << bits), s)
    return s


def check_elements(what: str, dims) -> None:
    """Refuses an intermediate buffer of more than MAX_ELEMENTS."""
    count = math.prod(int(d) for d in dims)
    if count > MAX_ELEMENTS:
        raise HloError(f"{what} would hold {count} elements, more than the "
                       f"interpreter's limit of {MAX_ELEMENTS}")


def etype_of(inst: HloInstruction, k: int) -> str:
    """The element type of operand k."""
    return inst.operands[k].shape.element_type

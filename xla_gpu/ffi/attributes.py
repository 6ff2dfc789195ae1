"""Custom-call attributes for FFI handlers, as XLA builds them.

A typed-FFI custom call carries its attributes in `backend_config` as JAX
prints an MLIR dictionary: `{mode = 1 : i32, scale = 2.0 : f32, name = "x",
arr = array<i64: 1, 2>, dict = {a = 1 : i32}}`. The reference
interpreter's reader (`xla_gpu.hlo.interpreter.decode_ffi_attributes`)
turns the text into Python values; this module checks them against what
XLA's FFI accepts and encodes them for libXlaGpuFfi.so, which builds the
call frame's attribute dictionaries (sorted by name) from the encoding.

What XLA accepts, and how each kind reaches a handler:

    true / false, `: i1`           scalar PRED (bool)
    integers `: i8 .. i64`         scalar S8 .. S64 (no type: i64)
    integers `: ui8 .. ui64`       scalar U8 .. U64
    floats `: f32`, `: f64`        scalar F32 / F64 (no type: f64)
    strings                        string (a byte span)
    array<i8|i16|i32|i64|f32|f64>  array of that element type
    dense<...> : tensor<...>       array (flattened; signed / unsigned
                                   integers of 8..64 bits, f32, f64)
    { ... }                        dictionary (nested, sorted too)

Anything else (f16 / bf16 scalars, array<i1>, `[...]` lists) is refused,
naming the attribute, as XLA refuses it. Enums decode on the handler side
from integers of their underlying type, structs from dictionaries.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ..errors import HloError

__all__ = ["encode_attributes", "check_attributes"]

# XLA_FFI_DataType numbers (xla::PrimitiveType).
PRED, S8, S16, S32, S64, U8, U16, U32, U64 = 1, 2, 3, 4, 5, 6, 7, 8, 9
F32, F64 = 11, 12

_SCALAR_TYPES = {
    np.dtype(np.bool_): PRED,
    np.dtype(np.int8): S8, np.dtype(np.int16): S16, np.dtype(np.int32): S32,
    np.dtype(np.int64): S64, np.dtype(np.uint8): U8, np.dtype(np.uint16): U16,
    np.dtype(np.uint32): U32, np.dtype(np.uint64): U64,
    np.dtype(np.float32): F32, np.dtype(np.float64): F64,
}
# Array attributes: everything above except pred (XLA has no bool arrays).
_ARRAY_TYPES = {dt: code for dt, code in _SCALAR_TYPES.items() if code != PRED}


def _kind(value: Any) -> str:
    return type(value).__name__


def _mlir_name(dtype: np.dtype) -> str:
    """The MLIR spelling of a numpy dtype, for messages (f16, bf16, i1...)."""
    names = {"float16": "f16", "bfloat16": "bf16", "bool": "i1", "float32": "f32",
             "float64": "f64"}
    return names.get(dtype.name, dtype.name)


def _scalar(value: Any, path: str) -> tuple[int, bytes]:
    """(dtype code, little-endian bytes) of a scalar attribute."""
    if isinstance(value, (bool, np.bool_)):
        return PRED, struct.pack("<?", bool(value))
    if isinstance(value, int):                       # untyped: MLIR's i64
        if not -(1 << 63) <= value < (1 << 63):
            raise HloError(f"attribute '{path}': {value} does not fit the i64 an "
                           "untyped integer attribute is")
        return S64, struct.pack("<q", value)
    if isinstance(value, float):                     # untyped: MLIR's f64
        return F64, struct.pack("<d", value)
    if isinstance(value, np.generic):
        code = _SCALAR_TYPES.get(value.dtype)
        if code is None:
            raise HloError(f"attribute '{path}': XLA's FFI has no {_mlir_name(value.dtype)} scalar "
                           "attributes (integers of 8..64 bits, f32, f64, bool)")
        return code, np.asarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
    raise HloError(f"attribute '{path}': unsupported attribute value of type {_kind(value)}")


def _encode(value: Any, path: str, out: bytearray, depth: int) -> None:
    if isinstance(value, dict):
        if depth > 64:
            raise HloError(f"attribute '{path}': dictionaries nest deeper than 64")
        out += b"D" + struct.pack("<I", len(value))
        for name, item in value.items():
            key = str(name).encode("utf-8", errors="surrogateescape")
            out += struct.pack("<I", len(key)) + key
            _encode(item, f"{path}.{name}" if path else str(name), out, depth + 1)
        return
    if isinstance(value, str):
        data = value.encode("utf-8", errors="surrogateescape")
        out += b"T" + struct.pack("<Q", len(data)) + data
        return
    if isinstance(value, np.ndarray):
        code = _ARRAY_TYPES.get(value.dtype)
        if code is None:
            raise HloError(f"attribute '{path}': XLA's FFI has no arrays of {_mlir_name(value.dtype)} "
                           "(integers of 8..64 bits, f32, f64)")
        flat = np.ascontiguousarray(value.reshape(-1), value.dtype.newbyteorder("<"))
        out += b"A" + struct.pack("<iQ", code, flat.size) + flat.tobytes()
        return
    if isinstance(value, (list, tuple)):
        raise HloError(f"attribute '{path}': XLA's FFI does not take a list attribute "
                       "([...]); use array<i64: ...> or a dictionary")
    code, data = _scalar(value, path)
    out += b"S" + struct.pack("<i", code) + data


def encode_attributes(attributes: dict[str, Any]) -> bytes:
    """The encoding libXlaGpuFfi.so reads: a dictionary, recursively."""
    out = bytearray()
    _encode(dict(attributes), "", out, 0)
    return bytes(out)


def check_attributes(attributes: dict[str, Any]) -> None:
    """Raises HloError when an attribute has a kind XLA's FFI refuses."""
    encode_attributes(attributes)

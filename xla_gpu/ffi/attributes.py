"""Custom-call attributes for FFI handlers, as XLA builds them.

A typed-FFI custom call carries its attributes in `backend_config` as JAX
prints an MLIR dictionary: `{mode = 1 : i32, scale = 2.0 : f32, name = "x",
arr = array<i64: 1, 2>, dict = {a = 1 : i32}}`. `decode_ffi_attributes`
turns the text into Python values (what a Python handler gets, in the
reference interpreter and in compiled programs alike); `encode_attributes`
checks them against what XLA's FFI accepts and encodes them for
libXlaGpuFfi.so, which builds the call frame's attribute dictionaries
(sorted by name) from the encoding.

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

import math
import struct
from typing import Any

import numpy as np

from ..errors import HloError

__all__ = ["decode_ffi_attributes", "handler_attributes", "encode_attributes",
           "check_attributes"]

_MLIR_INT_TYPES = {"i1": np.bool_, "i8": np.int8, "i16": np.int16,
                   "i32": np.int32, "i64": np.int64, "si8": np.int8,
                   "si16": np.int16, "si32": np.int32, "si64": np.int64,
                   "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32,
                   "ui64": np.uint64}
_MLIR_FLOAT_TYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
_ATTR_MAX_DEPTH = 64


def _mlir_type(name: str | None) -> Any:
    """The numpy type of an MLIR integer or float type name, or None
    (ml_dtypes, for bf16, is imported only when an attribute has one)."""
    if name == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return _MLIR_INT_TYPES.get(name) or _MLIR_FLOAT_TYPES.get(name)


class _AttributeReader:
    """A reader of the MLIR attribute dictionary that XLA prints as a typed
    FFI custom call's backend_config: `{a = 1 : i32, b = 2.5 : f32,
    c = "text", d = array<i64: 1, 2>, e = {nested = true}, f = [1, 2]}`."""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.pos, self.where = text, 0, where

    def error(self, message: str) -> HloError:
        return HloError(f"{self.where}: backend_config {message} at column "
                        f"{self.pos + 1} of {self.text!r}")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, token: str) -> None:
        self.skip()
        if not self.text.startswith(token, self.pos):
            raise self.error(f"expected '{token}'")
        self.pos += len(token)

    def word(self) -> str:
        self.skip()
        start = self.pos
        while self.pos < len(self.text) and (
                self.text[self.pos].isalnum() or self.text[self.pos] in "_.$"):
            self.pos += 1
        if start == self.pos:
            raise self.error("expected a name")
        return self.text[start:self.pos]

    def string(self) -> str:
        """A quoted string; MLIR's \\XX escapes are bytes, so the result
        is the UTF-8 text they spell (bytes that are not UTF-8 kept as
        surrogate escapes: `.encode(errors="surrogateescape")` gives them
        back)."""
        self.expect('"')
        out = bytearray()
        while self.pos < len(self.text) and self.text[self.pos] != '"':
            ch = self.text[self.pos]
            if ch == "\\" and self.pos + 1 < len(self.text):
                nxt = self.text[self.pos + 1]
                if nxt in '"\\':
                    out += nxt.encode()
                    self.pos += 2
                    continue
                hexpair = self.text[self.pos + 1:self.pos + 3]
                if nxt == "n":
                    out += b"\n"
                    self.pos += 2
                    continue
                if len(hexpair) == 2 and all(c in "0123456789abcdefABCDEF"
                                             for c in hexpair):
                    out.append(int(hexpair, 16))
                    self.pos += 3
                    continue
            out += ch.encode("utf-8", errors="surrogateescape")
            self.pos += 1
        if self.pos >= len(self.text):
            raise self.error("has an unterminated string")
        self.pos += 1
        return out.decode("utf-8", errors="surrogateescape")

    def number_text(self) -> str:
        self.skip()
        start = self.pos
        while self.pos < len(self.text) and (
                self.text[self.pos].isalnum() or self.text[self.pos] in "+-."):
            if self.text[self.pos] in "+-" and self.pos > start and \
                    self.text[self.pos - 1] not in "eE":
                break
            self.pos += 1
        return self.text[start:self.pos]

    def typed_number(self, raw: str, type_name: str | None) -> Any:
        try:
            if type_name in _MLIR_FLOAT_TYPES or type_name == "bf16":
                dtype = _mlir_type(type_name)
                if raw.lower().startswith("0x"):  # the bit pattern
                    bits = int(raw, 16)
                    width = np.dtype(dtype).itemsize
                    ints = {2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
                    return np.array(bits, ints).view(dtype)[()]
                return dtype(float(raw))
            if type_name in _MLIR_INT_TYPES:
                value = int(raw, 0)
                if type_name == "i1":
                    return np.bool_(value != 0)
                return _MLIR_INT_TYPES[type_name](value)
            if type_name is None:
                return int(raw, 0) if not any(c in raw for c in ".eE") or \
                    raw.lower().startswith("0x") else float(raw)
        except (ValueError, OverflowError) as e:
            raise self.error(f"has a bad number '{raw}' ({e})") from None
        raise self.error(f"has an unsupported type '{type_name}'")

    def value(self, depth: int = 0) -> Any:
        if depth > _ATTR_MAX_DEPTH:
            raise self.error("nests too deep")
        ch = self.peek()
        if ch == "{":
            return self.dictionary(depth + 1)
        if ch == '"':
            return self.string()
        if ch == "[":
            self.expect("[")
            items = []
            if self.peek() != "]":
                while True:
                    items.append(self.value(depth + 1))
                    if self.peek() != ",":
                        break
                    self.expect(",")
            self.expect("]")
            return items
        if ch.isalpha():
            start = self.pos
            name = self.word()
            if name in ("true", "false"):
                return name == "true"
            if name == "array":
                return self.dense_array()
            if name == "dense":
                return self.dense()
            self.pos = start
        raw = self.number_text()
        if not raw:
            raise self.error("expected a value")
        type_name = None
        if self.peek() == ":":
            self.expect(":")
            type_name = self.word()
        return self.typed_number(raw, type_name)

    def dense_array(self) -> np.ndarray:
        self.expect("<")
        type_name = self.word()
        values = []
        if self.peek() == ":":
            self.expect(":")
            while True:
                values.append(self.typed_number(self.number_text(),
                                                type_name))
                if self.peek() != ",":
                    break
                self.expect(",")
        self.expect(">")
        dtype = _mlir_type(type_name)
        if dtype is None:
            raise self.error(f"has an unsupported array type '{type_name}'")
        return np.array(values, dtype=dtype)

    def dense(self) -> np.ndarray:
        self.expect("<")
        depth, start = 1, self.pos
        while self.pos < len(self.text) and depth:
            depth += {"<": 1, ">": -1}.get(self.text[self.pos], 0)
            self.pos += 1
        body = self.text[start:self.pos - 1]
        self.expect(":")
        self.skip()
        tstart = self.pos
        depth = 0
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
                if depth == 0:
                    self.pos += 1
                    break
            elif depth == 0 and c in ",}":
                break
            self.pos += 1
        tensor = self.text[tstart:self.pos].strip()
        if not (tensor.startswith("tensor<") and tensor.endswith(">")):
            raise self.error(f"has an unsupported dense type '{tensor}'")
        parts = tensor[len("tensor<"):-1].split("x")
        etype, dims = parts[-1], [int(d) for d in parts[:-1]]
        dtype = _mlir_type(etype)
        if dtype is None:
            raise self.error(f"has an unsupported element type '{etype}'")
        flat = [self.typed_number(v.strip(), etype) for v in
                body.replace("[", " ").replace("]", " ").split(",")
                if v.strip()]
        count = math.prod(dims)
        if len(flat) == 1 and count != 1:
            flat = flat * count  # a splat
        if len(flat) != count:
            raise self.error(f"dense<{body}> does not fill {tensor}")
        return np.array(flat, dtype=dtype).reshape(dims)

    def dictionary(self, depth: int = 0) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        if self.peek() == "}":
            self.expect("}")
            return out
        while True:
            key = self.string() if self.peek() == '"' else self.word()
            if self.peek() == "=":
                self.expect("=")
                out[key] = self.value(depth + 1)
            else:  # a unit attribute
                out[key] = True
            if self.peek() != ",":
                break
            self.expect(",")
        self.expect("}")
        return out

    def finish(self) -> None:
        self.skip()
        if self.pos != len(self.text):
            raise self.error("has trailing text")


def decode_ffi_attributes(text: str, where: str = "custom-call") -> dict:
    """The attributes of a typed-FFI custom call's backend_config, as
    numpy scalars (typed by their MLIR type), str, bool, numpy arrays
    (`array<i32: ...>`, `dense<...>`), lists and dicts."""
    text = text.strip()
    if not text:
        return {}
    reader = _AttributeReader(text, where)
    out = reader.dictionary()
    reader.finish()
    return out

def handler_attributes(target: str, api_version: str, backend_config: Any,
                       where: str | None = None) -> dict[str, Any]:
    """The keyword arguments a Python custom-call handler gets, and the
    attributes a C handler's call frame holds: the attributes decoded from
    a typed-FFI backend_config, or backend_config=<text> for the older
    APIs (a backend_config that is no text counts as none). `where` names
    the call in errors (default: the target)."""
    text = backend_config if isinstance(backend_config, str) else ""
    if api_version == "API_VERSION_TYPED_FFI":
        return decode_ffi_attributes(text, where or f"custom call '{target}'")
    return {"backend_config": text} if text else {}


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

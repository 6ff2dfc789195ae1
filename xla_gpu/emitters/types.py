"""HLO element types and shapes as MLIR types and attributes."""

from __future__ import annotations

import numpy as np
from mlir import ir

from ..hlo import HloError
from ..hlo.opcodes import MINIFLOAT_TYPES, is_minifloat
from ..hlo.shape import ELEMENT_TYPES, Shape, bit_width, is_float, is_integral

__all__ = ["element_type", "tensor_type", "scalar_attr", "dense_attr",
           "check_supported", "complex_part", "is_complex"]

_FLOATS = {
    "f16": ir.F16Type.get, "bf16": ir.BF16Type.get, "f32": ir.F32Type.get,
    "f64": ir.F64Type.get, "f8e5m2": ir.Float8E5M2Type.get,
    "f8e4m3fn": ir.Float8E4M3FNType.get, "f8e4m3b11fnuz": ir.Float8E4M3B11FNUZType.get,
    "f8e5m2fnuz": ir.Float8E5M2FNUZType.get, "f8e4m3fnuz": ir.Float8E4M3FNUZType.get,
    "f8e4m3": ir.Float8E4M3Type.get, "f8e3m4": ir.Float8E3M4Type.get,
    "f8e8m0fnu": ir.Float8E8M0FNUType.get,
}


def element_type(name: str) -> ir.Type:
    """pred -> i1, s8/u8 -> i8 (signless: signedness lives in the ops), f8
    and f4 types -> i8 (their codes; see float8.py), ..."""
    if is_minifloat(name):
        return ir.IntegerType.get_signless(8)
    if name in _FLOATS:
        return _FLOATS[name]()
    if is_integral(name):
        # Sub-byte integers live in a byte, sign- or zero-extended.
        bits = bit_width(name)
        return ir.IntegerType.get_signless(bits if bits == 1 or bits >= 8 else 8)
    if name == "c64":
        return ir.ComplexType.get(ir.F32Type.get())
    if name == "c128":
        return ir.ComplexType.get(ir.F64Type.get())
    raise HloError(f"element type {name} has no MLIR type")


def tensor_type(shape: Shape) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape.dims), element_type(shape.element_type))


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def is_complex(name: str) -> bool:
    return name in ("c64", "c128")


def complex_part(name: str) -> str:
    """The element type of the real and imaginary parts of c64 / c128."""
    return {"c64": "f32", "c128": "f64"}[name]


def scalar_attr(name: str, value) -> ir.Attribute:
    t = element_type(name)
    if name in ("c64", "c128"):
        # complex.constant's value: [re, im].
        part = element_type(complex_part(name))
        value = complex(value)
        return ir.ArrayAttr.get([ir.FloatAttr.get(part, value.real),
                                 ir.FloatAttr.get(part, value.imag)])
    if is_minifloat(name):
        bits = np.array([value], dtype=ELEMENT_TYPES[name]).view(np.uint8)[0]
        return ir.IntegerAttr.get(t, _signed(int(bits), 8))
    if is_float(name):
        return ir.FloatAttr.get(t, float(value))
    if name == "pred":
        return ir.IntegerAttr.get(t, -1 if bool(value) else 0)
    return ir.IntegerAttr.get(t, _signed(int(value), bit_width(name)))


def dense_attr(shape: Shape, array: np.ndarray) -> ir.DenseElementsAttr:
    t = tensor_type(shape)
    array = np.ascontiguousarray(array.reshape(shape.dims))
    if shape.element_type == "pred":
        bits = np.packbits(array.reshape(-1).astype(np.bool_), bitorder="little")
        return ir.DenseElementsAttr.get(bits, type=t.element_type, shape=list(shape.dims))
    if is_integral(shape.element_type) and 1 < bit_width(shape.element_type) < 8:
        array = array.astype(np.int8 if shape.element_type.startswith("s") else np.uint8)
    if shape.element_type in ("c64", "c128"):
        # Interleaved (re, im) pairs, handed over as the parts' bits.
        array = array.astype(ELEMENT_TYPES[shape.element_type])
        part = array.dtype.itemsize // 2
        return ir.DenseElementsAttr.get(array.view(np.dtype(f"u{part}")),
                                        type=t.element_type, shape=list(shape.dims))
    width = array.dtype.itemsize * 8
    raw = array.view(np.dtype(f"u{array.dtype.itemsize}")) if width <= 64 else array
    return ir.DenseElementsAttr.get(raw, type=t.element_type, shape=list(shape.dims))


_SUPPORTED = {"pred", "s2", "s4", "s8", "s16", "s32", "s64", "u2", "u4", "u8", "u16",
              "u32", "u64", "f16", "bf16", "f32", "f64", "c64", "c128"}
# f8 and f4 values can be loaded, stored, compared and converted through
# f32; arithmetic on them is done in f32 as XLA does.
_F8 = frozenset(MINIFLOAT_TYPES)


def check_supported(shape: Shape, where) -> None:
    """Raises HloError for element types the emitters cannot handle yet;
    `where` is the instruction (for the message). Layouts are not checked:
    kernels take and give arrays in row-major logical order (what numpy
    and the runtime hand over), and only bitcasts look at layouts."""
    if shape.tuple_shapes is None and shape.element_type in _SUPPORTED:
        return   # the common case, asked of every instruction: no leaves list
    for leaf in shape.leaves():
        t = leaf.element_type
        if t not in _SUPPORTED and t not in _F8:
            raise where.unsupported(f"element type {t} is not supported by the emitters yet")

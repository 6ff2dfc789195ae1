"""f8 and f4 element types in emitted IR: stored as i8 (LLVM has no f8
types; f4e2m1fn takes a byte as the sub-byte integers do, its code in the
low 4 bits), converted exactly through helper functions that the module
gets once per type and direction:

    func.func private @xla_f8e4m3fn_to_f32(i8) -> f32      // 256-entry table
    func.func private @xla_f32_to_f8e4m3fn(f32) -> i8      // RNE, by search

Decoding reads a table of the 256 (f4: 16) values. Encoding rounds to
nearest even the way ml_dtypes (and so the reference interpreter) does: a
binary search for the largest code not above |x| in the table of
non-negative finite values, then the nearer of it and the next code (ties
to the even code); NaN -> the type's NaN; beyond the largest finite value
(after rounding) -> infinity where the type has one, NaN where it does not;
the sign goes on last (fnuz types have no -0: it becomes 0). f4e2m1fn has
neither infinity nor NaN: beyond its largest value it saturates (keeping the
sign) and NaN becomes -0, as ml_dtypes converts.

f8e8m0fnu (a biased exponent and nothing else) is encoded from f32's
exponent field instead (`_encode_e8m0`).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from mlir import ir
from mlir.dialects import arith, func, math, tensor

from ..dialects import xla_gpu
from ..hlo.opcodes import F8_TYPES, is_f8, is_minifloat
from ..hlo.shape import ELEMENT_TYPES, bit_width

__all__ = ["is_f8", "is_minifloat", "decode", "encode", "F8_TYPES"]


def _values(t: str) -> np.ndarray:
    """The float32 value of each code (256 for f8, 16 for f4)."""
    count = 1 << bit_width(t)
    return np.arange(count, dtype=np.uint8).view(ELEMENT_TYPES[t]).astype(np.float32)


def _code_of(t: str, x: float) -> int:
    """The code ml_dtypes gives the f32 value `x`."""
    return int(np.array([x], np.float32).astype(ELEMENT_TYPES[t]).view(np.uint8)[0])


def _module() -> ir.Operation:
    op = ir.InsertionPoint.current.block.owner.operation
    while op.name != "builtin.module":
        op = op.parent.operation
    return op


def _helper(name: str, arg: ir.Type, result: ir.Type, body) -> ir.Value:
    module = _module()
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            break
    else:
        with ir.InsertionPoint(module.regions[0].blocks[0]):
            f = func.FuncOp(name, ([arg], [result]), visibility="private")
            block = f.add_entry_block()
            with ir.InsertionPoint(block):
                func.ReturnOp([body(block.arguments[0])])
    return name


def _table(values: np.ndarray) -> ir.Value:
    t = ir.RankedTensorType.get([len(values)], ir.F32Type.get())
    return arith.constant(t, ir.DenseElementsAttr.get(np.ascontiguousarray(values), type=t))


def _index(i8_or_i32: ir.Value) -> ir.Value:
    return arith.index_castui(ir.IndexType.get(), i8_or_i32)


def _call(name: str, value: ir.Value, result: ir.Type) -> ir.Value:
    return xla_gpu.PureCallOp([result], ir.FlatSymbolRefAttr.get(name), [value]).results[0]


def decode(bits: ir.Value, t: str) -> ir.Value:
    """f32 value of the f8 code `bits` (i8)."""
    f32 = ir.F32Type.get()

    bits_count = bit_width(t)

    def body(code):
        if bits_count < 8:  # the code is the low bits of the byte
            code = arith.andi(code, arith.constant(code.type, (1 << bits_count) - 1))
        return tensor.extract(_table(_values(t)), [_index(code)])

    return _call(_helper(f"xla_{t}_to_f32", bits.type, f32, body), bits, f32)


def encode(value: ir.Value, t: str) -> ir.Value:
    """The f8 code (i8) nearest to the f32 `value`, ties to even."""
    if t == "f8e8m0fnu":
        return _encode_e8m0(value)
    i8 = ir.IntegerType.get_signless(8)
    values = _values(t)
    finfo = ml_dtypes.finfo(ELEMENT_TYPES[t])
    fnuz = "fnuz" in t
    sign_bit = 1 << (bit_width(t) - 1)
    # Non-negative finite codes 0..top, ascending in value.
    top = int(np.argmax(values[:sign_bit] == float(finfo.max)))
    positive = values[:top + 1]
    has_inf = bool(np.isinf(values).any())
    has_nan = bool(np.isnan(values).any())
    # Without NaN (f4e2m1fn) a NaN input gets the code ml_dtypes gives it
    # and overflow saturates to the largest value.
    nan_code = int(np.flatnonzero(np.isnan(values))[0]) if has_nan else _code_of(t, np.nan)
    inf_code = int(np.flatnonzero(values == np.inf)[0]) if has_inf else \
        nan_code if has_nan else top

    def body(x):
        f32, i32 = ir.F32Type.get(), ir.IntegerType.get_signless(32)
        index = ir.IndexType.get()
        table = _table(np.append(positive, np.float32(np.inf)))
        magnitude = math.absf(x)
        lo = arith.constant(index, 0)
        step = 1
        while step * 2 <= top:
            step *= 2
        while step >= 1:
            cand = arith.addi(lo, arith.constant(index, step))
            cand = arith.minui(cand, arith.constant(index, top))
            ok = arith.cmpf(arith.CmpFPredicate.OLE, tensor.extract(table, [cand]), magnitude)
            lo = arith.select(ok, cand, lo)
            step //= 2
        hi = arith.addi(lo, arith.constant(index, 1))
        below = tensor.extract(table, [lo])
        above = tensor.extract(table, [hi])
        d_lo = arith.subf(magnitude, below)
        d_hi = arith.subf(above, magnitude)
        lo_i = arith.index_cast(i32, lo)
        odd = arith.cmpi(arith.CmpIPredicate.ne, arith.andi(lo_i, arith.constant(i32, 1)),
                         arith.constant(i32, 0))
        take_hi = arith.ori(arith.cmpf(arith.CmpFPredicate.OGT, d_lo, d_hi),
                            arith.andi(arith.cmpf(arith.CmpFPredicate.OEQ, d_lo, d_hi), odd))
        code = arith.select(take_hi, arith.index_cast(i32, hi), lo_i)
        # Past the largest finite value: rounds to it within half an ulp
        # (the table's next entry is +inf, so d_hi is inf there), else overflow.
        half_ulp = float(finfo.max) + (float(finfo.max) - float(positive[top - 1])) / 2
        over = arith.cmpf(arith.CmpFPredicate.OGE, magnitude,
                          arith.constant(f32, ir.FloatAttr.get(f32, half_ulp)))
        if not has_inf:
            over_exact = arith.cmpf(arith.CmpFPredicate.OGT, magnitude,
                                    arith.constant(f32, ir.FloatAttr.get(f32, half_ulp)))
            # ml_dtypes keeps an exact tie at the boundary on max only when
            # max's code is even; otherwise it overflows.
            over = over if top % 2 else over_exact
        code = arith.select(over, arith.constant(i32, inf_code & (sign_bit - 1)), code)
        negative = arith.cmpi(arith.CmpIPredicate.slt, arith.bitcast(i32, x),
                              arith.constant(i32, 0))
        signed = arith.ori(code, arith.constant(i32, sign_bit))
        if fnuz:  # no -0: a negative zero result stays 0
            nonzero = arith.cmpi(arith.CmpIPredicate.ne, code, arith.constant(i32, 0))
            negative = arith.andi(negative, nonzero)
        code = arith.select(negative, signed, code)
        if not has_inf and has_nan:  # overflow is NaN, whatever the sign
            code = arith.select(over, arith.constant(i32, nan_code), code)
        is_nan = arith.cmpf(arith.CmpFPredicate.UNO, x, x)
        code = arith.select(is_nan, arith.constant(i32, nan_code), code)
        return arith.trunci(i8, code)

    return _call(_helper(f"xla_f32_to_{t}", ir.F32Type.get(), i8, body), value, i8)



def _encode_e8m0(value: ir.Value) -> ir.Value:
    """f8e8m0fnu's code (its biased exponent) for the f32 `value`, as
    ml_dtypes rounds: f32's exponent, plus one when the mantissa is at least
    half (ties up); f32 subnormals go to 2^-127 (code 0) below 1.5 * 2^-127
    and to 2^-126 from there; zero, negatives, infinities, NaN and what
    rounds past 2^127 are NaN (code 255)."""
    i8, i32 = ir.IntegerType.get_signless(8), ir.IntegerType.get_signless(32)

    def body(x):
        def c(v):
            return arith.constant(i32, v)
        bits = arith.bitcast(i32, x)
        exponent = arith.andi(arith.shrui(bits, c(23)), c(0xFF))
        mantissa = arith.andi(bits, c(0x7FFFFF))
        normal = arith.extui(i32, arith.cmpi(arith.CmpIPredicate.uge, mantissa, c(0x400000)))
        subnormal = arith.extui(i32, arith.cmpi(arith.CmpIPredicate.uge, mantissa, c(0x600000)))
        is_subnormal = arith.cmpi(arith.CmpIPredicate.eq, exponent, c(0))
        code = arith.select(is_subnormal, subnormal, arith.addi(exponent, normal))
        # Not a positive finite number (sign set, zero, inf, NaN) or too large.
        invalid = arith.ori(
            arith.cmpi(arith.CmpIPredicate.slt, bits, c(1)),
            arith.cmpi(arith.CmpIPredicate.ugt, code, c(254)))
        invalid = arith.ori(invalid, arith.cmpi(arith.CmpIPredicate.eq, exponent, c(0xFF)))
        return arith.trunci(i8, arith.select(invalid, c(0xFF), code))

    return _call(_helper("xla_f32_to_f8e8m0fnu", ir.F32Type.get(), i8, body), value, i8)

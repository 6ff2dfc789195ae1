"""Elementwise ops with XLA's semantics where numpy's differ: conversions,
comparisons (IEEE totalOrder too), integer division and shifts as XLA
defines them, reduce-precision on the bits, wrap-around integers."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..module import HloError, HloInstruction
from ..opcodes import SMALL_FLOAT_TYPES
from ..shape import ELEMENT_TYPES, bit_width
from .dtypes import (bits_unsigned, compute_dtype, down, etype_of, int_limits, is_float,
                     is_int, signed_of_bits, up, wrap_int)


def _float_unary(fn: Callable, x: np.ndarray, etype: str) -> np.ndarray:
    return down(fn(up(x, etype)), etype)


def _round_afz(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


_erf_vec = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x.copy()
    return _erf_vec(x)


def _sign(x: np.ndarray, etype: str) -> np.ndarray:
    v = up(x, etype)
    if etype in ("c64", "c128"):
        mag = np.abs(v)
        return down(np.where(mag == 0, 0, v / np.where(mag == 0, 1, mag)),
                    etype)
    if is_float(etype):
        return down(np.where(v > 0, 1.0, np.where(v < 0, -1.0, v)), etype)
    return down(np.sign(v), etype)


def _popcnt(x: np.ndarray, etype: str) -> np.ndarray:
    u = bits_unsigned(x, etype)
    if hasattr(np, "bitwise_count"):
        count = np.bitwise_count(u).astype(np.int64)
    else:  # numpy < 2
        count = np.zeros(u.shape, np.int64)
        for i in range(64):
            count += ((u >> np.uint64(i)) & np.uint64(1)).astype(np.int64)
    return wrap_int(count, etype)


def _bit_length(u: np.ndarray) -> np.ndarray:
    u = u.astype(np.uint64)
    n = np.zeros(u.shape, np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        big = u >= np.uint64(1 << s)
        n += np.where(big, s, 0)
        u = np.where(big, u >> np.uint64(s), u)
    return n + (u > 0)


def _clz(x: np.ndarray, etype: str) -> np.ndarray:
    bits = bit_width(etype)
    return wrap_int(bits - _bit_length(bits_unsigned(x, etype)), etype)


# (width, explicit mantissa bits) of the floats reduce-precision works on
# in their own bits. f8 and f4 values go through f16 (exact), where
# XLA:GPU's float normalization computes their reduce-precision.
_OWN_BITS_FLOATS = {"f16": (16, 10), "bf16": (16, 7), "f32": (32, 23),
                    "f64": (64, 52)}


def _reduce_precision(x: np.ndarray, etype: str, exponent_bits: int,
                      mantissa_bits: int) -> np.ndarray:
    """XLA's reduce-precision, on the bits of the value's own type: the
    mantissa rounded to `mantissa_bits` bits (nearest, ties to even; a
    carry moves into the exponent, up to infinity), then exponents past
    the range of `exponent_bits` bits flushed to signed infinity (above)
    or signed zero (below; that format's denormals too). A NaN stays the
    input NaN (also with no mantissa bit left, as XLA's emitters do)."""
    if etype not in _OWN_BITS_FLOATS:
        wide = np.asarray(x).astype(np.float32).astype(np.float16)
        return _reduce_precision(wide, "f16", exponent_bits, mantissa_bits) \
            .astype(np.float32).astype(ELEMENT_TYPES[etype])
    width, src_mant = _OWN_BITS_FLOATS[etype]
    src_exp = width - 1 - src_mant
    v = np.atleast_1d(np.asarray(x, ELEMENT_TYPES[etype]))
    utype = {16: np.uint16, 32: np.uint32, 64: np.uint64}[width]
    u = np.uint64
    full = (1 << width) - 1
    # In uint64, masked back to the width: only a NaN's bits can wrap
    # around 2^64, and NaNs are put back below.
    bits = v.view(utype).astype(u)
    sign_mask = 1 << (width - 1)
    exp_mask = ((1 << src_exp) - 1) << src_mant
    is_nan = (bits & u(full ^ sign_mask)) > u(exp_mask)
    if mantissa_bits < src_mant:
        shift = src_mant - mantissa_bits
        last_kept = 1 << shift
        last_bit = (bits >> u(shift)) & u(1)
        with np.errstate(over="ignore"):
            bits = bits + last_bit + u((last_kept >> 1) - 1)
        bits = bits & u(full & ~(last_kept - 1))
    if exponent_bits < src_exp:
        bias = (1 << (src_exp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = bits & u(exp_mask)
        overflow = exponent > u((bias + reduced_bias) << src_mant)
        underflow = exponent <= u((bias - reduced_bias) << src_mant)
        signed_zero = bits & u(sign_mask)
        bits = np.where(overflow, signed_zero | u(exp_mask),
                        np.where(underflow, signed_zero, bits))
    out = bits.astype(utype).view(v.dtype)
    return np.where(is_nan, v, out).astype(v.dtype).reshape(np.shape(x))


def convert(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    x = np.asarray(x)
    dst_dtype = ELEMENT_TYPES[dst]
    if src == dst:
        return x.copy()
    if dst == "pred":
        return x.astype(np.int64) != 0 if is_int(src) else \
            np.asarray(x.astype(compute_dtype(src)) != 0)
    if src == "pred":
        x, src = x.astype(np.uint8), "u8"
    if src in ("c64", "c128"):
        if dst in ("c64", "c128"):
            return x.astype(dst_dtype)
        x, src = np.real(x).copy(), ("f32" if src == "c64" else "f64")
    if is_float(src):
        if dst in ("c64", "c128"):
            return x.astype(np.float64).astype(dst_dtype)
        if is_float(dst):
            if src in SMALL_FLOAT_TYPES and dst in SMALL_FLOAT_TYPES:
                return x.astype(np.float32).astype(dst_dtype)
            return x.astype(dst_dtype)
        # float -> int: truncate, NaN -> 0, saturate at the type's limits.
        lo, hi = int_limits(dst)
        t = np.trunc(x.astype(np.float64))
        t = np.where(np.isnan(t), 0.0, t)
        too_big = t >= float(hi)
        too_small = t <= float(lo)
        wide = np.uint64 if dst[0] == "u" else np.int64
        mid = np.where(too_big | too_small, 0.0, t).astype(wide)
        out = np.where(too_big, wide(hi), np.where(too_small, wide(lo), mid))
        return wrap_int(out, dst)
    # integer source
    wide_src = x.astype(np.uint64 if src[0] == "u" else np.int64)
    if is_int(dst):
        return wrap_int(wide_src, dst)
    if dst in ("c64", "c128"):
        return wide_src.astype(dst_dtype)
    if dst in ("f32", "f64"):
        return wide_src.astype(dst_dtype)
    return wide_src.astype(np.float64).astype(dst_dtype)


def _bit_patterns(x: np.ndarray, etype: str) -> np.ndarray:
    """The bits of each element of `etype` as uint64 (its low bits)."""
    x = np.asarray(x)
    bits = bit_width(etype)
    if is_int(etype):
        return bits_unsigned(x, etype)
    if bits < 8:                  # a 4-bit float: its code in a byte
        return np.ascontiguousarray(x).view(np.uint8).astype(np.uint64) & \
            np.uint64((1 << bits) - 1)
    unsigned = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
    return np.ascontiguousarray(x).view(unsigned).astype(np.uint64)


def _of_bit_patterns(u: np.ndarray, etype: str) -> np.ndarray:
    """uint64 patterns (low bits) as elements of `etype`."""
    bits = bit_width(etype)
    if is_int(etype):
        return wrap_int(signed_of_bits(u, bits) if etype[0] == "s" else u, etype)
    unsigned = {4: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32,
                64: np.uint64}[bits]
    return np.ascontiguousarray(u.astype(unsigned)).view(ELEMENT_TYPES[etype])


def _bitcast_convert_sub_byte(x: np.ndarray, src: str, dst: str,
                              out_dims: tuple[int, ...]) -> np.ndarray:
    """bitcast-convert between widths where one side is under a byte: the
    narrow side's minor dimension holds a wide element's pieces, the first
    piece its lowest bits (as packed 4-bit data lies in memory)."""
    sbits, dbits = bit_width(src), bit_width(dst)
    if src[0] == "c" or dst[0] == "c":
        raise HloError(f"bitcast-convert {src} -> {dst} is not supported")
    u = _bit_patterns(x, src)
    if sbits > dbits:             # each element split into its pieces
        shifts = np.arange(sbits // dbits, dtype=np.uint64) * np.uint64(dbits)
        pieces = (u[..., None] >> shifts) & np.uint64((1 << dbits) - 1)
        return _of_bit_patterns(pieces, dst).reshape(out_dims)
    shifts = np.arange(dbits // sbits, dtype=np.uint64) * np.uint64(sbits)
    joined = np.bitwise_or.reduce(u << shifts, axis=-1)
    return _of_bit_patterns(np.asarray(joined, np.uint64), dst).reshape(out_dims)


def bitcast_convert(x: np.ndarray, src: str, dst: str,
                    out_dims: tuple[int, ...]) -> np.ndarray:
    x = np.asarray(x)
    if src == dst:
        return x.reshape(out_dims).copy()
    sbits, dbits = bit_width(src), bit_width(dst)
    if "pred" in (src, dst):
        raise HloError("bitcast-convert of pred is not supported")
    if sbits != dbits and min(sbits, dbits) < 8:
        return _bitcast_convert_sub_byte(x, src, dst, out_dims)
    if sbits < 8 or dbits < 8:
        if not is_int(src):    # a 4-bit float: its code, as unsigned bits
            x, src = np.ascontiguousarray(x).view(np.uint8) & ((1 << sbits) - 1), \
                f"u{sbits}"
        if not is_int(dst):
            return np.ascontiguousarray(bits_unsigned(x, src).astype(np.uint8)) \
                .view(ELEMENT_TYPES[dst]).reshape(out_dims)
        return wrap_int(signed_of_bits(bits_unsigned(x, src), sbits)
                        if dst[0] == "s" else bits_unsigned(x, src), dst)
    out = np.ascontiguousarray(x).view(ELEMENT_TYPES[dst])
    return out.reshape(out_dims)


def _compare(a: np.ndarray, b: np.ndarray, etype: str, direction: str,
             total_order: bool) -> np.ndarray:
    if total_order and is_float(etype):
        ka, kb = total_order_key(a, etype), total_order_key(b, etype)
    else:  # exact in the compute type
        ka, kb = up(a, etype), up(b, etype)
    ops = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less,
           "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal}
    if direction not in ops:
        raise HloError(f"unknown comparison direction '{direction}'")
    if etype in ("c64", "c128") and direction not in ("EQ", "NE"):
        raise HloError(f"complex values are not ordered ({direction})")
    return np.asarray(ops[direction](ka, kb))


def total_order_key(x: np.ndarray, etype: str) -> np.ndarray:
    """Integers that order floats as IEEE totalOrder does:
    -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN."""
    x = np.asarray(x)
    if bit_width(etype) < 8:   # f4 codes fill part of a byte: order their f32 values
        x = x.astype(np.float32)
    size = x.dtype.itemsize
    sint = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[size]
    bits = np.ascontiguousarray(x).view(sint).astype(np.int64)
    magnitude = (1 << (8 * size - 1)) - 1
    return np.where(bits < 0, bits ^ magnitude, bits)


def _int_divide(a: np.ndarray, b: np.ndarray, etype: str,
                remainder: bool) -> np.ndarray:
    a, b = np.broadcast_arrays(up(a, etype), up(b, etype))
    zero = b == 0
    if etype[0] == "u":
        safe = np.where(zero, 1, b).astype(np.uint64)
        if remainder:
            out = np.where(zero, a, a % safe)
        else:
            out = np.where(zero, np.uint64(int_limits(etype)[1]), a // safe)
        return wrap_int(out, etype)
    lo = int_limits(etype)[0]
    overflow = (a == lo) & (b == -1)
    safe = np.where(zero | overflow, 1, b).astype(np.int64)
    q = a // safe
    r = a - q * safe
    fix = (r != 0) & ((a < 0) != (safe < 0))  # floor -> toward zero
    q = np.where(fix, q + 1, q)
    r = np.where(fix, r - safe, r)
    if remainder:
        out = np.where(zero, a, np.where(overflow, 0, r))
    else:
        out = np.where(zero, -1, np.where(overflow, lo, q))
    return wrap_int(out, etype)


def _int_power(a: np.ndarray, b: np.ndarray, etype: str) -> np.ndarray:
    base, exp = np.broadcast_arrays(up(a, etype), up(b, etype))
    base = base.copy()
    signed = etype[0] == "s"
    e = np.where(exp < 0, 0, exp).astype(np.uint64) if signed else \
        exp.astype(np.uint64)
    acc = np.ones(base.shape, base.dtype)
    for _ in range(64):
        if not np.any(e):
            break
        acc = np.where((e & np.uint64(1)) != 0, acc * base, acc)
        base = base * base
        e = e >> np.uint64(1)
    if signed:
        negative = exp < 0
        odd = (exp % 2) != 0
        original = up(a, etype)
        special = np.where(original == 1, 1,
                           np.where(original == -1,
                                    np.where(odd, -1, 1), 0))
        acc = np.where(negative, special, acc)
    return wrap_int(acc, etype)


def _shift(a: np.ndarray, b: np.ndarray, etype: str, kind: str) -> np.ndarray:
    bits = bit_width(etype)
    ua = bits_unsigned(a, etype)
    ub = bits_unsigned(b, etype)
    ua, ub = np.broadcast_arrays(ua, ub)
    out_of_range = ub >= np.uint64(bits)
    amount = np.where(out_of_range, 0, ub).astype(np.uint64)
    if kind == "left":
        out = ua << amount
        out = np.where(out_of_range, np.uint64(0), out)
        if bits < 64:
            out = out & np.uint64((1 << bits) - 1)
        out = signed_of_bits(out, bits) if etype[0] == "s" else out
    elif kind == "logical":
        out = np.where(out_of_range, np.uint64(0), ua >> amount)
        out = signed_of_bits(out, bits) if etype[0] == "s" else out
    else:
        sa = signed_of_bits(ua, bits)
        shifted = sa >> amount.astype(np.int64)
        out = np.where(out_of_range, np.where(sa < 0, -1, 0), shifted)
        if etype[0] == "u":
            out = out.astype(np.int64).view(np.uint64)
            if bits < 64:
                out = out & np.uint64((1 << bits) - 1)
    return wrap_int(out, etype)


def _mulhi(a: np.ndarray, b: np.ndarray, etype: str) -> np.ndarray:
    """The high half of the double-width product of two integers of
    `etype` (the product is exact in Python integers, so 64-bit operands
    need no split)."""
    if not is_int(etype):
        raise HloError(f"'mulhi' needs integer operands, not {etype}")
    bits = bit_width(etype)
    x = np.asarray(up(a, etype)).astype(object)
    y = np.asarray(up(b, etype)).astype(object)
    x, y = np.broadcast_arrays(x, y)
    high = np.frompyfunc(lambda p, q: (int(p) * int(q)) >> bits, 2, 1)(x, y)
    # The high half is in the signed (or unsigned) range of `etype`.
    dtype = np.int64 if etype[0] == "s" else np.uint64
    return wrap_int(np.asarray(high, dtype=object).astype(dtype), etype)


def binary_arith(op: str, a: np.ndarray, b: np.ndarray, etype: str):
    """add / subtract / multiply / divide / remainder / maximum / minimum /
    power / atan2 / and / or / xor on arrays of `etype`."""
    if etype == "pred":
        x, y = np.asarray(a, bool), np.asarray(b, bool)
        table = {"and": np.logical_and, "or": np.logical_or,
                 "xor": np.logical_xor, "maximum": np.logical_or,
                 "minimum": np.logical_and, "add": np.logical_or,
                 "multiply": np.logical_and, "subtract": np.logical_xor}
        if op not in table:
            raise HloError(f"'{op}' is not defined on pred")
        return np.asarray(table[op](x, y))
    if is_int(etype):
        if op in ("divide", "remainder"):
            return _int_divide(a, b, etype, op == "remainder")
        if op == "power":
            return _int_power(a, b, etype)
        x, y = up(a, etype), up(b, etype)
        table = {"add": np.add, "subtract": np.subtract,
                 "multiply": np.multiply, "maximum": np.maximum,
                 "minimum": np.minimum, "and": np.bitwise_and,
                 "or": np.bitwise_or, "xor": np.bitwise_xor}
        if op not in table:
            raise HloError(f"'{op}' is not defined on integers")
        return wrap_int(table[op](x, y), etype)
    x, y = up(a, etype), up(b, etype)
    is_complex = etype in ("c64", "c128")
    if op == "power":
        out = np.power(x, y)
        out = np.where((x == 1) | (y == 0), 1, out)
    elif op == "remainder":
        if is_complex:
            raise HloError("remainder is not defined on complex values")
        out = np.fmod(x, y)
    elif op in ("maximum", "minimum"):
        if is_complex:
            raise HloError(f"'{op}' is not defined on complex values")
        out = (np.maximum if op == "maximum" else np.minimum)(x, y)
        # IEEE 754-2019 maximum/minimum: -0 < +0 (numpy returns either).
        both_zero = (x == 0) & (y == 0)
        if np.any(both_zero):
            negative = np.signbit(x) & np.signbit(y) if op == "maximum" \
                else np.signbit(x) | np.signbit(y)
            out = np.where(both_zero, np.where(negative, -0.0, 0.0), out)
    elif op == "atan2":
        if is_complex:
            i = 1j
            out = -i * np.log((y + i * x) / np.sqrt(y * y + x * x))
        else:
            out = np.arctan2(x, y)
    else:
        table = {"add": np.add, "subtract": np.subtract,
                 "multiply": np.multiply, "divide": np.divide}
        if op not in table:
            raise HloError(f"'{op}' is not defined on floating-point values")
        out = table[op](x, y)
    return down(out, etype)


_FLOAT_UNARY: dict[str, Callable] = {
    "exponential": np.exp,
    "exponential-minus-one": np.expm1,
    "log": np.log,
    "log-plus-one": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda v: 1 / np.sqrt(v),
    "cbrt": np.cbrt,
    "tanh": np.tanh,
    "logistic": lambda v: 1 / (1 + np.exp(-v)),
    "sine": np.sin,
    "cosine": np.cos,
    "tan": np.tan,
    "erf": erf,
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atanh": np.arctanh,
    "cosh": np.cosh,
    "sinh": np.sinh,
    "ceil": np.ceil,
    "floor": np.floor,
    "round-nearest-even": np.rint,
    "round-nearest-afz": _round_afz,
}
_REAL_ONLY = frozenset({"cbrt", "erf", "ceil", "floor", "round-nearest-even",
                        "round-nearest-afz", "exponential-minus-one",
                        "log-plus-one"})


def _unary(inst: HloInstruction, x: np.ndarray, src: str) -> np.ndarray:
    op = inst.opcode
    dst = inst.shape.element_type
    if op in _FLOAT_UNARY:
        if not (is_float(src) or (src in ("c64", "c128") and
                                   op not in _REAL_ONLY)):
            raise HloError(f"'{op}' is not defined on {src}")
        return _float_unary(_FLOAT_UNARY[op], x, src)
    if op == "abs":
        if src in ("c64", "c128"):
            return down(np.abs(up(x, src)), dst)
        if src[0] == "u" or src == "pred":
            return np.asarray(x).copy()
        return down(np.abs(up(x, src)), src)
    if op == "negate":
        if src == "pred":
            raise HloError("negate is not defined on pred")
        if src[0] == "u":
            return wrap_int(np.uint64(0) - up(x, src), src)
        return down(np.negative(up(x, src)), src)
    if op == "sign":
        return _sign(x, src)
    if op == "not":
        if src == "pred":
            return np.logical_not(x)
        if not is_int(src):
            raise HloError(f"'not' is not defined on {src}")
        return wrap_int(np.invert(up(x, src)), src)
    if op == "is-finite":
        return np.asarray(np.isfinite(up(x, src)))
    if op == "popcnt":
        return _popcnt(x, src)
    if op == "count-leading-zeros":
        return _clz(x, src)
    if op == "real":
        return down(np.real(up(x, src)), dst) if src in ("c64", "c128") \
            else np.asarray(x).astype(ELEMENT_TYPES[dst])
    if op == "imag":
        return down(np.imag(up(x, src)), dst) if src in ("c64", "c128") \
            else np.zeros(np.shape(x), ELEMENT_TYPES[dst])
    if op == "copy":
        return np.array(x, copy=True)
    if op == "convert":
        return convert(x, src, dst)
    if op == "reduce-precision":
        if not is_float(src):
            raise HloError("reduce-precision needs a floating-point operand")
        eb = inst.attrs.get("exponent_bits")
        mb = inst.attrs.get("mantissa_bits")
        if not isinstance(eb, int) or not isinstance(mb, int) or eb < 1 or \
                mb < 0:
            raise HloError("reduce-precision needs exponent_bits >= 1 and "
                           "mantissa_bits >= 0")
        return _reduce_precision(x, src, eb, mb)
    raise HloError(f"unsupported unary op '{op}'")


_BINARY_ARITH = frozenset({"add", "subtract", "multiply", "divide",
                           "remainder", "maximum", "minimum", "power",
                           "atan2", "and", "or", "xor"})
_SHIFTS = {"shift-left": "left", "shift-right-logical": "logical",
           "shift-right-arithmetic": "arithmetic"}
_ELEMENTWISE = frozenset(_FLOAT_UNARY) | _BINARY_ARITH | frozenset(_SHIFTS) | \
    frozenset({"abs", "negate", "sign", "not", "is-finite", "popcnt",
               "count-leading-zeros", "real", "imag", "copy", "convert",
               "reduce-precision", "compare", "complex", "select", "clamp",
               "bitcast-convert", "mulhi"})
# Ops whose evaluation does not depend on the operand shapes: they may run
# "batched" on arrays standing for many scalars.
BATCHABLE = _ELEMENTWISE | frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "broadcast",
    "reshape", "bitcast", "transpose", "call", "fusion", "map",
    "optimization-barrier", "opt-barrier"})


def _h_elementwise(ev, inst, ops, batch):
    op = inst.opcode
    if op in _BINARY_ARITH:
        return binary_arith(op, ops[0], ops[1], etype_of(inst, 0))
    if op == "mulhi":
        return _mulhi(ops[0], ops[1], etype_of(inst, 0))
    if op in _SHIFTS:
        etype = etype_of(inst, 0)
        if not is_int(etype):
            raise HloError(f"'{op}' needs integer operands")
        return _shift(ops[0], ops[1], etype, _SHIFTS[op])
    if op == "compare":
        direction = inst.attrs.get("direction")
        total = inst.attrs.get("type") == "TOTALORDER"
        return _compare(ops[0], ops[1], etype_of(inst, 0), str(direction),
                        total)
    if op == "complex":
        a, b = np.broadcast_arrays(np.asarray(ops[0]), np.asarray(ops[1]))
        out = np.empty(a.shape, inst.shape.dtype)
        out.real = a
        out.imag = b
        return out
    if op == "select":
        pred = np.asarray(ops[0], bool)
        return np.asarray(np.where(pred, ops[1], ops[2])).astype(
            inst.shape.dtype, copy=False)
    if op == "clamp":
        etype = inst.shape.element_type
        if etype in ("c64", "c128"):
            raise HloError("clamp is not defined on complex values")
        lo, x, hi = (up(v, etype) for v in ops)
        return down(np.minimum(hi, np.maximum(x, lo)), etype)
    if op == "bitcast-convert":
        dims = np.shape(ops[0]) if batch is not None else inst.shape.dims
        return bitcast_convert(ops[0], etype_of(inst, 0),
                               inst.shape.element_type, tuple(dims))
    return _unary(inst, ops[0], etype_of(inst, 0))


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {op: _h_elementwise for op in _ELEMENTWISE}

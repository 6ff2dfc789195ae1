"""A numpy reference interpreter of HLO, with XLA's semantics where numpy's
differ. numpy and ml_dtypes only.

    outputs = evaluate(module, x, y)      # a tuple of numpy arrays

Conventions:

* Values are numpy arrays of the shape's dtype (`pred` -> np.bool_, bf16 and
  f8 -> ml_dtypes floats, s4/u4/s2/u2 -> ml_dtypes ints, one element per
  byte). Tuple results are flattened depth first; a non-tuple result is a
  1-tuple.
* Floating-point ops on f16, bf16 and f8 compute in f32 and round the result
  to the type, op by op (what XLA's CPU and GPU backends do). f32 ops compute
  in f64 and round to f32: exact for +, -, *, /, sqrt (a double rounding
  through f64 is harmless for them) and more accurate than f32 for the
  transcendental functions. Integer ops wrap around.
* Computations called per element (reduce, scatter, map, reduce-window)
  are evaluated on whole numpy arrays at once when they are scalar
  computations ("batched"), so large reductions stay fast.
* Reduction order. `reduce` combines the init value with the reduced
  elements in row-major order of the reduced dimensions:
  - reducers that are a single add / multiply / maximum / minimum / and /
    or / xor of the two parameters run strictly sequentially
    (init, x0, x1, ...), via numpy's `ufunc.accumulate` for floating-point
    add/multiply (exact per-step rounding) and `ufunc.reduce` otherwise
    (where the order cannot change the result);
  - any other reducer runs sequentially, batched over the kept elements,
    when at most 1024 elements are reduced into each output; above that it
    runs as an order-preserving pairwise tree (x0 op x1, x2 op x3, ...; the
    partial results combined the same way; finally init op total), which
    assumes the reducer is associative, as XLA does.
  `reduce-window` applies the reducer over each window's elements in
  row-major order, starting from the init value. `scatter` applies the
  combiner to the updates in row-major order of the update elements.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

from .module import HloComputation, HloError, HloInstruction, HloModule
from .shape import ELEMENT_TYPES, Shape, bit_width

__all__ = ["evaluate"]

Value = Any  # np.ndarray or tuple of Values

_SMALL_FLOATS = frozenset({
    "f16", "bf16", "f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz",
    "f8e4m3fnuz", "f8e4m3", "f8e3m4"})
_SEQUENTIAL_REDUCE_LIMIT = 1024


def evaluate(module_or_computation: HloModule | HloComputation,
             *args: np.ndarray) -> tuple[np.ndarray, ...]:
    """Evaluates the ENTRY computation of a module (or the given computation)
    on numpy inputs. Returns the result leaves, depth first.

    Raises ValueError for arguments that do not match the parameters (count,
    shape or dtype; the message names the parameter) and HloError for
    instructions the interpreter cannot evaluate."""
    if isinstance(module_or_computation, HloModule):
        comp = module_or_computation.entry
    elif isinstance(module_or_computation, HloComputation):
        comp = module_or_computation
    else:
        raise TypeError("evaluate() takes an HloModule or HloComputation, "
                        f"got {type(module_or_computation).__name__}")
    params = comp.parameters
    if len(args) != len(params):
        raise ValueError(f"computation '{comp.name}' takes {len(params)} "
                         f"argument{'s' if len(params) != 1 else ''}, "
                         f"got {len(args)}")
    values = [_check_argument(p, a) for p, a in zip(params, args)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = _Evaluator().run(comp, values)
    leaves: list[np.ndarray] = []
    _flatten(result, leaves)
    return tuple(np.array(leaf, copy=True) for leaf in leaves)


def _check_argument(param: HloInstruction, arg: Any, shape: Shape | None = None,
                    where: str = "") -> Value:
    shape = param.shape if shape is None else shape
    label = f"parameter {param.parameter_number} ('{param.name}'){where}"
    if shape.is_tuple:
        if not isinstance(arg, (tuple, list)) or \
                len(arg) != len(shape.tuple_shapes):
            raise ValueError(f"{label}: expected a tuple of "
                             f"{len(shape.tuple_shapes)} arrays for {shape}")
        return tuple(_check_argument(param, a, s, f"{where}[{i}]")
                     for i, (a, s) in enumerate(zip(arg, shape.tuple_shapes)))
    if shape.element_type == "token":
        return np.zeros((0,), np.uint8)
    arr = np.asarray(arg)
    if arr.dtype != shape.dtype:
        raise ValueError(f"{label}: expected dtype {shape.dtype} "
                         f"({shape.element_type}), got {arr.dtype}")
    if arr.shape != shape.dims:
        raise ValueError(f"{label}: expected shape {shape.dims} "
                         f"({shape}), got {arr.shape}")
    return arr


def _flatten(value: Value, out: list) -> None:
    if isinstance(value, tuple):
        for v in value:
            _flatten(v, out)
    else:
        out.append(value)


# ------------------------------------------------------------------ types


def _compute_dtype(etype: str) -> np.dtype:
    """The numpy type an op on `etype` computes in."""
    if etype == "pred":
        return np.dtype(np.bool_)
    if etype in _SMALL_FLOATS:
        return np.dtype(np.float32)
    if etype in ("f32", "f64"):
        return np.dtype(np.float64)
    if etype in ("c64", "c128"):
        return np.dtype(np.complex128)
    if etype[0] == "u":
        return np.dtype(np.uint64)
    return np.dtype(np.int64)


def _is_float(etype: str) -> bool:
    return etype in _SMALL_FLOATS or etype in ("f32", "f64")


def _is_int(etype: str) -> bool:
    return etype[0] in "su"


def _int_limits(etype: str) -> tuple[int, int]:
    bits = bit_width(etype)
    if etype[0] == "u":
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _up(x: np.ndarray, etype: str) -> np.ndarray:
    """x (of type etype) in its compute type."""
    return np.asarray(x).astype(_compute_dtype(etype), copy=False)


def _wrap_int(x: np.ndarray, etype: str) -> np.ndarray:
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


def _down(x: np.ndarray, etype: str) -> np.ndarray:
    """A value of the compute domain rounded / wrapped to `etype`."""
    if _is_int(etype):
        return _wrap_int(x, etype)
    if etype == "pred":
        return np.asarray(x).astype(np.bool_)
    return np.asarray(x).astype(ELEMENT_TYPES[etype])


def _bits_unsigned(x: np.ndarray, etype: str) -> np.ndarray:
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


def _signed_of_bits(u: np.ndarray, bits: int) -> np.ndarray:
    """uint64 bit patterns of width `bits` as sign-extended int64."""
    s = u.astype(np.uint64).view(np.int64) if bits == 64 else \
        u.astype(np.int64)
    if bits < 64:
        s = np.where(s >= (1 << (bits - 1)), s - (1 << bits), s)
    return s


# -------------------------------------------------------------- elementwise


def _float_unary(fn: Callable, x: np.ndarray, etype: str) -> np.ndarray:
    return _down(fn(_up(x, etype)), etype)


def _round_afz(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


_erf_vec = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x.copy()
    return _erf_vec(x)


def _sign(x: np.ndarray, etype: str) -> np.ndarray:
    v = _up(x, etype)
    if etype in ("c64", "c128"):
        mag = np.abs(v)
        return _down(np.where(mag == 0, 0, v / np.where(mag == 0, 1, mag)),
                     etype)
    if _is_float(etype):
        return _down(np.where(v > 0, 1.0, np.where(v < 0, -1.0, v)), etype)
    return _down(np.sign(v), etype)


def _popcnt(x: np.ndarray, etype: str) -> np.ndarray:
    u = _bits_unsigned(x, etype)
    if hasattr(np, "bitwise_count"):
        count = np.bitwise_count(u).astype(np.int64)
    else:  # numpy < 2
        count = np.zeros(u.shape, np.int64)
        for i in range(64):
            count += ((u >> np.uint64(i)) & np.uint64(1)).astype(np.int64)
    return _wrap_int(count, etype)


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
    return _wrap_int(bits - _bit_length(_bits_unsigned(x, etype)), etype)


def _reduce_precision(x: np.ndarray, etype: str, exponent_bits: int,
                      mantissa_bits: int) -> np.ndarray:
    """XLA's reduce-precision: round the mantissa to nearest even, then
    flush values outside the reduced exponent range to inf / signed zero;
    NaNs stay NaN."""
    if etype == "f64":
        v = np.asarray(x, np.float64)
        utype, nbits, src_mant, src_exp = np.uint64, 64, 52, 11
    else:
        v = np.asarray(x).astype(np.float32)
        utype, nbits, src_mant, src_exp = np.uint32, 32, 23, 8
    bits = v.view(utype).astype(np.uint64)
    if mantissa_bits < src_mant:
        shift = src_mant - mantissa_bits
        last_bit_mask = 1 << shift
        half_minus_one = (last_bit_mask >> 1) - 1
        last_bit = (bits >> np.uint64(shift)) & np.uint64(1)
        bits = bits + last_bit + np.uint64(half_minus_one)
        bits = bits & np.uint64(((1 << nbits) - 1) & ~(last_bit_mask - 1))
    if exponent_bits < src_exp:
        sign_mask = np.uint64(1 << (nbits - 1))
        exp_mask = np.uint64(((1 << src_exp) - 1) << src_mant)
        bias = (1 << (src_exp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        max_exp = bias + reduced_bias
        min_exp = bias - reduced_bias
        exponent = bits & exp_mask
        overflow = exponent > np.uint64(max_exp << src_mant)
        underflow = exponent <= np.uint64(min_exp << src_mant)
        signed_zero = bits & sign_mask
        signed_inf = signed_zero | exp_mask
        bits = np.where(overflow, signed_inf,
                        np.where(underflow, signed_zero, bits))
    out = bits.astype(utype).view(v.dtype)
    out = np.where(np.isnan(v), v, out)
    return out.astype(ELEMENT_TYPES[etype])


def _convert(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    x = np.asarray(x)
    dst_dtype = ELEMENT_TYPES[dst]
    if src == dst:
        return x.copy()
    if dst == "pred":
        return x.astype(np.int64) != 0 if _is_int(src) else \
            np.asarray(x.astype(_compute_dtype(src)) != 0)
    if src == "pred":
        x, src = x.astype(np.uint8), "u8"
    if src in ("c64", "c128"):
        if dst in ("c64", "c128"):
            return x.astype(dst_dtype)
        x, src = np.real(x).copy(), ("f32" if src == "c64" else "f64")
    if _is_float(src):
        if dst in ("c64", "c128"):
            return x.astype(np.float64).astype(dst_dtype)
        if _is_float(dst):
            if src in _SMALL_FLOATS and dst in _SMALL_FLOATS:
                return x.astype(np.float32).astype(dst_dtype)
            return x.astype(dst_dtype)
        # float -> int: truncate, NaN -> 0, saturate at the type's limits.
        lo, hi = _int_limits(dst)
        t = np.trunc(x.astype(np.float64))
        t = np.where(np.isnan(t), 0.0, t)
        too_big = t >= float(hi)
        too_small = t <= float(lo)
        wide = np.uint64 if dst[0] == "u" else np.int64
        mid = np.where(too_big | too_small, 0.0, t).astype(wide)
        out = np.where(too_big, wide(hi), np.where(too_small, wide(lo), mid))
        return _wrap_int(out, dst)
    # integer source
    wide_src = x.astype(np.uint64 if src[0] == "u" else np.int64)
    if _is_int(dst):
        return _wrap_int(wide_src, dst)
    if dst in ("c64", "c128"):
        return wide_src.astype(dst_dtype)
    if dst in ("f32", "f64"):
        return wide_src.astype(dst_dtype)
    return wide_src.astype(np.float64).astype(dst_dtype)


def _bitcast_convert(x: np.ndarray, src: str, dst: str,
                     out_dims: tuple[int, ...]) -> np.ndarray:
    x = np.asarray(x)
    if src == dst:
        return x.reshape(out_dims).copy()
    sbits, dbits = bit_width(src), bit_width(dst)
    if "pred" in (src, dst):
        raise HloError("bitcast-convert of pred is not supported")
    if sbits < 8 or dbits < 8:
        if sbits != dbits or not (_is_int(src) and _is_int(dst)):
            raise HloError(f"bitcast-convert {src} -> {dst} is not supported")
        return _wrap_int(_signed_of_bits(_bits_unsigned(x, src), sbits)
                         if dst[0] == "s" else _bits_unsigned(x, src), dst)
    out = np.ascontiguousarray(x).view(ELEMENT_TYPES[dst])
    return out.reshape(out_dims)


def _compare(a: np.ndarray, b: np.ndarray, etype: str, direction: str,
             total_order: bool) -> np.ndarray:
    if total_order and _is_float(etype):
        ka, kb = _total_order_key(a, etype), _total_order_key(b, etype)
    else:  # exact in the compute type
        ka, kb = _up(a, etype), _up(b, etype)
    ops = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less,
           "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal}
    if direction not in ops:
        raise HloError(f"unknown comparison direction '{direction}'")
    if etype in ("c64", "c128") and direction not in ("EQ", "NE"):
        raise HloError(f"complex values are not ordered ({direction})")
    return np.asarray(ops[direction](ka, kb))


def _total_order_key(x: np.ndarray, etype: str) -> np.ndarray:
    """Integers that order floats as IEEE totalOrder does:
    -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN."""
    x = np.asarray(x)
    size = x.dtype.itemsize
    sint = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[size]
    bits = np.ascontiguousarray(x).view(sint).astype(np.int64)
    magnitude = (1 << (8 * size - 1)) - 1
    return np.where(bits < 0, bits ^ magnitude, bits)


def _int_divide(a: np.ndarray, b: np.ndarray, etype: str,
                remainder: bool) -> np.ndarray:
    a, b = np.broadcast_arrays(_up(a, etype), _up(b, etype))
    zero = b == 0
    if etype[0] == "u":
        safe = np.where(zero, 1, b).astype(np.uint64)
        if remainder:
            out = np.where(zero, a, a % safe)
        else:
            out = np.where(zero, np.uint64(_int_limits(etype)[1]), a // safe)
        return _wrap_int(out, etype)
    lo = _int_limits(etype)[0]
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
    return _wrap_int(out, etype)


def _int_power(a: np.ndarray, b: np.ndarray, etype: str) -> np.ndarray:
    base, exp = np.broadcast_arrays(_up(a, etype), _up(b, etype))
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
        original = _up(a, etype)
        special = np.where(original == 1, 1,
                           np.where(original == -1,
                                    np.where(odd, -1, 1), 0))
        acc = np.where(negative, special, acc)
    return _wrap_int(acc, etype)


def _shift(a: np.ndarray, b: np.ndarray, etype: str, kind: str) -> np.ndarray:
    bits = bit_width(etype)
    ua = _bits_unsigned(a, etype)
    ub = _bits_unsigned(b, etype)
    ua, ub = np.broadcast_arrays(ua, ub)
    out_of_range = ub >= np.uint64(bits)
    amount = np.where(out_of_range, 0, ub).astype(np.uint64)
    if kind == "left":
        out = ua << amount
        out = np.where(out_of_range, np.uint64(0), out)
        if bits < 64:
            out = out & np.uint64((1 << bits) - 1)
        out = _signed_of_bits(out, bits) if etype[0] == "s" else out
    elif kind == "logical":
        out = np.where(out_of_range, np.uint64(0), ua >> amount)
        out = _signed_of_bits(out, bits) if etype[0] == "s" else out
    else:
        sa = _signed_of_bits(ua, bits)
        shifted = sa >> amount.astype(np.int64)
        out = np.where(out_of_range, np.where(sa < 0, -1, 0), shifted)
        if etype[0] == "u":
            out = out.astype(np.int64).view(np.uint64)
            if bits < 64:
                out = out & np.uint64((1 << bits) - 1)
    return _wrap_int(out, etype)


def _binary_arith(op: str, a: np.ndarray, b: np.ndarray, etype: str):
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
    if _is_int(etype):
        if op in ("divide", "remainder"):
            return _int_divide(a, b, etype, op == "remainder")
        if op == "power":
            return _int_power(a, b, etype)
        x, y = _up(a, etype), _up(b, etype)
        table = {"add": np.add, "subtract": np.subtract,
                 "multiply": np.multiply, "maximum": np.maximum,
                 "minimum": np.minimum, "and": np.bitwise_and,
                 "or": np.bitwise_or, "xor": np.bitwise_xor}
        if op not in table:
            raise HloError(f"'{op}' is not defined on integers")
        return _wrap_int(table[op](x, y), etype)
    x, y = _up(a, etype), _up(b, etype)
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
    return _down(out, etype)


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
    "erf": _erf,
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
        if not (_is_float(src) or (src in ("c64", "c128") and
                                   op not in _REAL_ONLY)):
            raise HloError(f"'{op}' is not defined on {src}")
        return _float_unary(_FLOAT_UNARY[op], x, src)
    if op == "abs":
        if src in ("c64", "c128"):
            return _down(np.abs(_up(x, src)), dst)
        if src[0] == "u" or src == "pred":
            return np.asarray(x).copy()
        return _down(np.abs(_up(x, src)), src)
    if op == "negate":
        if src == "pred":
            raise HloError("negate is not defined on pred")
        if src[0] == "u":
            return _wrap_int(np.uint64(0) - _up(x, src), src)
        return _down(np.negative(_up(x, src)), src)
    if op == "sign":
        return _sign(x, src)
    if op == "not":
        if src == "pred":
            return np.logical_not(x)
        if not _is_int(src):
            raise HloError(f"'not' is not defined on {src}")
        return _wrap_int(np.invert(_up(x, src)), src)
    if op == "is-finite":
        return np.asarray(np.isfinite(_up(x, src)))
    if op == "popcnt":
        return _popcnt(x, src)
    if op == "count-leading-zeros":
        return _clz(x, src)
    if op == "real":
        return _down(np.real(_up(x, src)), dst) if src in ("c64", "c128") \
            else np.asarray(x).astype(ELEMENT_TYPES[dst])
    if op == "imag":
        return _down(np.imag(_up(x, src)), dst) if src in ("c64", "c128") \
            else np.zeros(np.shape(x), ELEMENT_TYPES[dst])
    if op == "copy":
        return np.array(x, copy=True)
    if op == "convert":
        return _convert(x, src, dst)
    if op == "reduce-precision":
        if not _is_float(src):
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
               "bitcast-convert"})
# Ops whose evaluation does not depend on the operand shapes: they may run
# "batched" on arrays standing for many scalars.
_BATCHABLE = _ELEMENTWISE | frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "broadcast",
    "reshape", "bitcast", "transpose", "call", "fusion", "map",
    "optimization-barrier"})


# ----------------------------------------------------------- the evaluator


class _Evaluator:
    def __init__(self) -> None:
        self._scalar_cache: dict[int, bool] = {}

    # -- computations

    def run(self, comp: HloComputation, args: Sequence[Value],
            batch: tuple[int, ...] | None = None) -> Value:
        """Evaluates `comp`. With `batch`, comp is a scalar computation and
        every argument stands for an array of that shape of scalars."""
        values: dict[int, Value] = {}
        params = comp.parameters
        if len(args) != len(params):
            raise HloError(f"computation '{comp.name}' takes {len(params)} "
                           f"arguments, got {len(args)}")
        for p, a in zip(params, args):
            values[id(p)] = a
        for inst in _reachable_post_order(comp.root):
            if inst.opcode == "parameter":
                if id(inst) not in values:
                    raise inst.error("parameter was not given a value")
                continue
            operands = [values[id(o)] for o in inst.operands]
            values[id(inst)] = self.eval_instruction(inst, operands, batch)
        result = values[id(comp.root)]
        if batch is not None:
            result = _broadcast_leaves(result, batch)
        return result

    def is_scalar_computation(self, comp: HloComputation) -> bool:
        key = id(comp)
        if key not in self._scalar_cache:
            self._scalar_cache[key] = False  # recursion guard
            ok = True
            for inst in comp.instructions:
                if any(leaf.rank for leaf in inst.shape.leaves()) or \
                        inst.opcode not in _BATCHABLE:
                    ok = False
                    break
                for called in inst.called_computations:
                    if not self.is_scalar_computation(called):
                        ok = False
                if not ok:
                    break
            self._scalar_cache[key] = ok
        return self._scalar_cache[key]

    def apply(self, comp: HloComputation, args: Sequence[Value],
              batch: tuple[int, ...]) -> Value:
        """Applies a scalar computation to arrays of `batch` shape, element
        by element (batched when possible, a loop otherwise)."""
        if self.is_scalar_computation(comp):
            return self.run(comp, args, batch)
        count = math.prod(batch)
        results = []
        for i in range(count):
            idx = np.unravel_index(i, batch) if batch else ()
            scalar_args = [_index_leaves(a, idx) for a in args]
            results.append(self.run(comp, scalar_args))
        shape = comp.root.shape
        return _stack_results(results, shape, batch)

    # -- instructions

    def eval_instruction(self, inst: HloInstruction, ops: list[Value],
                         batch: tuple[int, ...] | None) -> Value:
        handler = _HANDLERS.get(inst.opcode)
        if handler is None:
            raise inst.error(f"opcode '{inst.opcode}' is not supported by the "
                             "reference interpreter")
        try:
            value = handler(self, inst, ops, batch)
        except HloError as e:
            if "instruction '" in str(e):
                raise
            raise inst.error(str(e)) from e
        except (ValueError, IndexError, TypeError, KeyError, OverflowError,
                ZeroDivisionError, AttributeError, MemoryError) as e:
            raise inst.error(f"evaluation failed: {type(e).__name__}: {e}") \
                from e
        if batch is None:
            _check_value(inst, value, inst.shape)
        return value


def _check_value(inst: HloInstruction, value: Value, shape: Shape) -> None:
    if shape.is_tuple:
        if not isinstance(value, tuple) or \
                len(value) != len(shape.tuple_shapes):
            raise inst.error(f"computed a value that is not {shape} "
                             "(an inconsistent module?)")
        for v, s in zip(value, shape.tuple_shapes):
            _check_value(inst, v, s)
        return
    if shape.element_type == "token":
        return
    if not isinstance(value, np.ndarray) or value.shape != shape.dims or \
            value.dtype != shape.dtype:
        got = f"{getattr(value, 'dtype', type(value).__name__)}" \
              f"{list(getattr(value, 'shape', ()))}"
        raise inst.error(f"computed {got}, but the instruction's shape is "
                         f"{shape} (an inconsistent module?)")


def _reachable_post_order(root: HloInstruction) -> list[HloInstruction]:
    order: list[HloInstruction] = []
    seen: set[int] = set()
    stack: list[tuple[HloInstruction, int]] = [(root, 0)]
    seen.add(id(root))
    while stack:
        node, i = stack[-1]
        if i < len(node.operands):
            stack[-1] = (node, i + 1)
            op = node.operands[i]
            if id(op) not in seen:
                seen.add(id(op))
                stack.append((op, 0))
        else:
            order.append(node)
            stack.pop()
    return order


def _broadcast_leaves(value: Value, batch: tuple[int, ...]) -> Value:
    if isinstance(value, tuple):
        return tuple(_broadcast_leaves(v, batch) for v in value)
    return np.broadcast_to(np.asarray(value), batch)


def _index_leaves(value: Value, idx) -> Value:
    if isinstance(value, tuple):
        return tuple(_index_leaves(v, idx) for v in value)
    return np.asarray(np.asarray(value)[idx])


def _stack_results(results: list, shape: Shape, batch: tuple[int, ...]):
    if shape.is_tuple:
        return tuple(_stack_results([r[i] for r in results], s, batch)
                     for i, s in enumerate(shape.tuple_shapes))
    out = np.empty(batch + shape.dims, shape.dtype)
    for i, r in enumerate(results):
        idx = np.unravel_index(i, batch) if batch else ()
        out[idx] = r
    return out


# ---------------------------------------------------------------- handlers


def _etype_of(inst: HloInstruction, k: int) -> str:
    return inst.operands[k].shape.element_type


def _h_elementwise(ev, inst, ops, batch):
    op = inst.opcode
    if op in _BINARY_ARITH:
        return _binary_arith(op, ops[0], ops[1], _etype_of(inst, 0))
    if op in _SHIFTS:
        etype = _etype_of(inst, 0)
        if not _is_int(etype):
            raise HloError(f"'{op}' needs integer operands")
        return _shift(ops[0], ops[1], etype, _SHIFTS[op])
    if op == "compare":
        direction = inst.attrs.get("direction")
        total = inst.attrs.get("type") == "TOTALORDER"
        return _compare(ops[0], ops[1], _etype_of(inst, 0), str(direction),
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
        lo, x, hi = (_up(v, etype) for v in ops)
        return _down(np.minimum(hi, np.maximum(x, lo)), etype)
    if op == "bitcast-convert":
        dims = np.shape(ops[0]) if batch is not None else inst.shape.dims
        return _bitcast_convert(ops[0], _etype_of(inst, 0),
                                inst.shape.element_type, tuple(dims))
    return _unary(inst, ops[0], _etype_of(inst, 0))


def _h_constant(ev, inst, ops, batch):
    if inst.literal is None:
        raise HloError("the constant's value was elided from the text "
                       "('{...}')")
    return inst.literal


def _h_tuple(ev, inst, ops, batch):
    return tuple(ops)


def _h_gte(ev, inst, ops, batch):
    return ops[0][inst.attrs["index"]]


def _h_broadcast(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    if batch is not None:
        return x
    dims = tuple(inst.attrs.get("dimensions", ()))
    out_dims = inst.shape.dims
    if len(dims) != x.ndim:
        raise HloError(f"broadcast dimensions {list(dims)} do not match the "
                       f"rank-{x.ndim} operand")
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order)
    shape = [1] * len(out_dims)
    for i, d in enumerate(sorted(dims)):
        if x.shape[i] != out_dims[d]:
            raise HloError(f"operand dimension {order[i]} ({x.shape[i]}) does "
                           f"not match output dimension {d} ({out_dims[d]})")
        shape[d] = x.shape[i]
    return np.broadcast_to(x.reshape(shape), out_dims)


def _h_reshape(ev, inst, ops, batch):
    if batch is not None:
        return np.asarray(ops[0])
    return np.reshape(ops[0], inst.shape.dims)


def _physical(x: np.ndarray, layout) -> np.ndarray:
    """The elements of x in memory order for its layout."""
    if layout is None or list(layout) == list(range(x.ndim - 1, -1, -1)):
        return x.reshape(-1)
    return np.transpose(x, tuple(reversed(layout))).reshape(-1)


def _from_physical(buf: np.ndarray, dims, layout) -> np.ndarray:
    if layout is None or list(layout) == list(range(len(dims) - 1, -1, -1)):
        return buf.reshape(dims)
    major_to_minor = tuple(reversed(layout))
    arr = buf.reshape([dims[d] for d in major_to_minor])
    return np.transpose(arr, np.argsort(major_to_minor))


def _h_bitcast(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    src_shape = inst.operands[0].shape
    src, dst = src_shape.element_type, inst.shape.element_type
    if batch is not None:  # scalars: only the element type can change
        return x if src == dst else _bitcast_convert(x, src, dst, x.shape)
    buf = _physical(x, src_shape.layout)
    if src != dst:
        if src_shape.num_elements * bit_width(src) != \
                inst.shape.num_elements * bit_width(dst):
            raise HloError(f"bitcast from {src_shape} to {inst.shape} "
                           "changes the byte size")
        buf = _bitcast_convert(buf, src, dst, (inst.shape.num_elements,))
    elif buf.size != inst.shape.num_elements:
        raise HloError(f"bitcast from {src_shape} to {inst.shape} changes "
                       "the element count")
    return _from_physical(buf, inst.shape.dims, inst.shape.layout)


def _h_transpose(ev, inst, ops, batch):
    if batch is not None:
        return np.asarray(ops[0])
    return np.transpose(ops[0], inst.attrs["dimensions"])


def _h_copy_like(ev, inst, ops, batch):
    return ops[0]


def _h_slice(ev, inst, ops, batch):
    spec = inst.attrs.get("slice")
    x = np.asarray(ops[0])
    if not isinstance(spec, list) or len(spec) != x.ndim:
        raise HloError("slice needs one [start:limit:stride] per dimension")
    for (start, limit, stride), n in zip(spec, x.shape):
        if not 0 <= start <= limit <= n or stride < 1:
            raise HloError(f"slice [{start}:{limit}:{stride}] is out of "
                           f"bounds for a dimension of size {n}")
    return x[tuple(slice(s, l, st) for s, l, st in spec)]


def _index_scalar(v: Value) -> int:
    arr = np.asarray(v)
    if arr.dtype.kind in "biu" or arr.dtype in (ml_dtypes.int4, ml_dtypes.int2,
                                                 ml_dtypes.uint4,
                                                 ml_dtypes.uint2):
        return int(arr.astype(np.int64) if arr.dtype.kind != "u" else arr)
    raise HloError(f"start indices must be integers, got {arr.dtype}")


def _start_indices(ops: list, first: int, rank: int) -> list[int]:
    rest = ops[first:]
    if len(rest) == 1 and np.ndim(rest[0]) == 1:  # one vector of starts
        vec = np.asarray(rest[0])
        return [_index_scalar(vec[i]) for i in range(vec.shape[0])]
    return [_index_scalar(v) for v in rest]


def _h_dynamic_slice(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    starts = _start_indices(ops, 1, x.ndim)
    sizes = tuple(inst.attrs.get("dynamic_slice_sizes", inst.shape.dims))
    if len(starts) != x.ndim or len(sizes) != x.ndim:
        raise HloError("dynamic-slice needs one start index and size per "
                       "dimension")
    index = []
    for s, size, n in zip(starts, sizes, x.shape):
        if size > n:
            raise HloError(f"slice size {size} exceeds the dimension {n}")
        s = min(max(s, 0), n - size)
        index.append(slice(s, s + size))
    return x[tuple(index)]


def _h_dynamic_update_slice(ev, inst, ops, batch):
    x = np.array(ops[0], copy=True)
    update = np.asarray(ops[1])
    starts = _start_indices(ops, 2, x.ndim)
    if len(starts) != x.ndim or update.ndim != x.ndim:
        raise HloError("dynamic-update-slice needs one start index per "
                       "dimension")
    index = []
    for s, size, n in zip(starts, update.shape, x.shape):
        if size > n:
            raise HloError(f"update size {size} exceeds the dimension {n}")
        s = min(max(s, 0), n - size)
        index.append(slice(s, s + size))
    x[tuple(index)] = update
    return x


def _h_pad(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    value = np.asarray(ops[1])
    config = inst.attrs.get("padding")
    if not isinstance(config, list) or len(config) != x.ndim:
        raise HloError("pad needs one lo_hi_interior entry per dimension")
    grown = []
    for (lo, hi, interior), n in zip(config, x.shape):
        core = n + max(n - 1, 0) * interior
        grown.append(max(lo, 0) + core + max(hi, 0))
    out = np.full(grown, value, dtype=x.dtype)
    place = tuple(slice(max(lo, 0), max(lo, 0) + (n - 1) * (interior + 1) + 1
                        if n else max(lo, 0), interior + 1)
                  for (lo, hi, interior), n in zip(config, x.shape))
    out[place] = x
    crop = tuple(slice(max(-lo, 0), size - max(-hi, 0))
                 for (lo, hi, _), size in zip(config, grown))
    out = out[crop]
    if out.shape != inst.shape.dims:
        raise HloError(f"padding {config} of {x.shape} gives {out.shape}, "
                       f"not {inst.shape}")
    return out


def _h_concatenate(ev, inst, ops, batch):
    dims = inst.attrs.get("dimensions")
    if not isinstance(dims, tuple) or len(dims) != 1:
        raise HloError("concatenate needs dimensions={d}")
    return np.concatenate([np.asarray(o) for o in ops], axis=dims[0])


def _h_reverse(ev, inst, ops, batch):
    dims = tuple(inst.attrs.get("dimensions", ()))
    x = np.asarray(ops[0])
    return np.flip(x, axis=dims) if dims else x


def _h_iota(ev, inst, ops, batch):
    dims = inst.shape.dims
    d = inst.attrs.get("iota_dimension")
    if not isinstance(d, int) or not 0 <= d < len(dims):
        raise HloError(f"bad iota_dimension {d!r} for {inst.shape}")
    etype = inst.shape.element_type
    line = np.arange(dims[d], dtype=np.int64)
    values = _convert(line, "s64", etype) if etype != "s64" else line
    shape = [1] * len(dims)
    shape[d] = dims[d]
    return np.broadcast_to(values.reshape(shape), dims)


# ---- reduce


_SIMPLE_REDUCERS = {"add": np.add, "multiply": np.multiply,
                    "maximum": np.maximum, "minimum": np.minimum,
                    "and": None, "or": None, "xor": None}


def _simple_binary(comp: HloComputation, etype: str) -> str | None:
    """The opcode when `comp` is `ROOT op(p0, p1)` of two scalar `etype`
    parameters ('assign' for `ROOT p1`)."""
    params = comp.parameters
    if len(params) != 2 or any(p.shape.is_tuple or p.shape.rank or
                               p.shape.element_type != etype for p in params):
        return None
    root = comp.root
    if root is params[1]:
        return "assign"
    if root.opcode not in _SIMPLE_REDUCERS or root.shape.is_tuple or \
            root.shape.element_type != etype or len(root.operands) != 2:
        return None
    if {id(o) for o in root.operands} != {id(params[0]), id(params[1])}:
        return None
    if root.operands[0] is root.operands[1]:
        return None
    return root.opcode


def _ufunc_for(op: str, etype: str):
    if op in ("and", "or", "xor"):
        if etype == "pred":
            return {"and": np.logical_and, "or": np.logical_or,
                    "xor": np.logical_xor}[op]
        return {"and": np.bitwise_and, "or": np.bitwise_or,
                "xor": np.bitwise_xor}[op]
    if etype == "pred":
        return {"add": np.logical_or, "multiply": np.logical_and,
                "maximum": np.logical_or, "minimum": np.logical_and}[op]
    return _SIMPLE_REDUCERS[op]


def _h_reduce(ev, inst, ops, batch):
    n = len(ops) // 2
    inputs = [np.asarray(o) for o in ops[:n]]
    inits = [np.asarray(o) for o in ops[n:]]
    comp = inst.attrs["to_apply"]
    dims = tuple(inst.attrs.get("dimensions", ()))
    rank = inputs[0].ndim
    if any(x.shape != inputs[0].shape for x in inputs):
        raise HloError("reduce inputs differ in shape")
    if sorted(set(dims)) != sorted(dims) or any(not 0 <= d < rank
                                                for d in dims):
        raise HloError(f"bad reduce dimensions {list(dims)}")
    kept = [d for d in range(rank) if d not in dims]
    kept_shape = tuple(inputs[0].shape[d] for d in kept)
    count = math.prod(inputs[0].shape[d] for d in dims)
    flat = [np.transpose(x, kept + sorted(dims)).reshape(kept_shape + (count,))
            for x in inputs]
    etypes = [_etype_of(inst, k) for k in range(n)]
    if n == 1:
        simple = _simple_binary(comp, etypes[0])
        if simple is not None and simple != "assign":
            return _reduce_simple(simple, flat[0], inits[0], etypes[0],
                                  kept_shape)
    return _reduce_general(ev, comp, flat, inits, kept_shape, count,
                           n > 1 or inst.shape.is_tuple)


def _reduce_simple(op: str, x: np.ndarray, init: np.ndarray, etype: str,
                   kept_shape: tuple[int, ...]) -> np.ndarray:
    ufunc = _ufunc_for(op, etype)
    init_b = np.broadcast_to(init, kept_shape)
    if x.shape[-1] == 0:
        return np.array(init_b, copy=True)
    if (_is_float(etype) or etype in ("c64", "c128")) and \
            op in ("add", "multiply"):
        # Sequential, rounding to the element type after every step.
        dtype = ELEMENT_TYPES[etype]
        seq = np.concatenate([init_b[..., None].astype(dtype), x], axis=-1)
        try:
            return np.asarray(ufunc.accumulate(seq, axis=-1)[..., -1])
        except TypeError:  # no accumulate loop for the type: step by step
            acc = seq[..., 0]
            for i in range(1, seq.shape[-1]):
                acc = _binary_arith(op, acc, seq[..., i], etype)
            return np.asarray(acc)
    if etype == "pred":
        return np.asarray(ufunc(init_b, ufunc.reduce(x, axis=-1)))
    wide = _up(x, etype)
    total = ufunc.reduce(wide, axis=-1)
    return _down(ufunc(_up(init_b, etype), total), etype)


def _reduce_general(ev, comp, flat, inits, kept_shape, count, is_tuple):
    def call(a, b, batch):
        out = ev.apply(comp, list(a) + list(b), batch)
        return list(out) if is_tuple else [out]

    inits_b = [np.broadcast_to(i, kept_shape) for i in inits]
    if count == 0:
        acc = [np.array(i, copy=True) for i in inits_b]
    elif count <= _SEQUENTIAL_REDUCE_LIMIT:
        acc = inits_b
        for r in range(count):
            acc = call(acc, [x[..., r] for x in flat], kept_shape)
    else:
        vals = flat
        while vals[0].shape[-1] > 1:
            m = vals[0].shape[-1]
            half = m // 2
            left = [v[..., 0:2 * half:2] for v in vals]
            right = [v[..., 1:2 * half:2] for v in vals]
            combined = call(left, right, kept_shape + (half,))
            if m % 2:
                combined = [np.concatenate([c, v[..., -1:]], axis=-1)
                            for c, v in zip(combined, vals)]
            vals = combined
        acc = call(inits_b, [v[..., 0] for v in vals], kept_shape)
    acc = [np.array(a, copy=True) for a in acc]
    return tuple(acc) if is_tuple else acc[0]


# ---- reduce-window


def _h_reduce_window(ev, inst, ops, batch):
    n = len(ops) // 2
    inputs = [np.asarray(o) for o in ops[:n]]
    inits = [np.asarray(o) for o in ops[n:]]
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, HloComputation):
        raise HloError("reduce-window needs to_apply=<computation>")
    window = inst.attrs.get("window", {})
    if not isinstance(window, dict):
        raise HloError("reduce-window needs window={size=...}")
    rank = inputs[0].ndim
    size = tuple(window.get("size", (1,) * rank))
    stride = tuple(window.get("stride", (1,) * rank))
    pad = list(window.get("pad", [(0, 0)] * rank))
    base_dil = tuple(window.get("lhs_dilate", (1,) * rank))
    win_dil = tuple(window.get("rhs_dilate", (1,) * rank))
    if not all(len(t) == rank for t in (size, stride, pad, base_dil, win_dil)):
        raise HloError("window fields do not match the operand rank")
    out_leaves = inst.shape.leaves()
    out_dims = out_leaves[0].dims
    padded = []
    for x, init in zip(inputs, inits):
        # Base dilation, then padding (negative padding crops), with init.
        dil_shape = [max((d - 1) * b + 1, 0) for d, b in zip(x.shape, base_dil)]
        grown = [max(lo, 0) + d + max(hi, 0)
                 for (lo, hi), d in zip(pad, dil_shape)]
        buf = np.full(grown, init, dtype=x.dtype)
        place = tuple(slice(max(lo, 0), max(lo, 0) + dd, b)
                      for (lo, _), dd, b in zip(pad, dil_shape, base_dil))
        buf[place] = x
        crop = tuple(slice(max(-lo, 0), g - max(-hi, 0))
                     for (lo, hi), g in zip(pad, grown))
        padded.append(buf[crop])
    acc = [np.broadcast_to(i, out_dims) for i in inits]
    is_tuple = n > 1 or inst.shape.is_tuple
    for w in np.ndindex(*size):
        views = []
        for p in padded:
            idx = tuple(slice(wi * wd, wi * wd + (o - 1) * s + 1, s)
                        if o else slice(0, 0)
                        for wi, wd, o, s in zip(w, win_dil, out_dims, stride))
            view = p[idx]
            if view.shape != out_dims:
                raise HloError(f"window does not fit: {view.shape} vs "
                               f"{out_dims}")
            views.append(view)
        out = ev.apply(comp, acc + views, out_dims)
        acc = list(out) if is_tuple else [out]
    acc = [np.array(a, copy=True) for a in acc]
    return tuple(acc) if is_tuple else acc[0]


# ---- gather / scatter


def _as_index_array(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "u" and x.dtype.itemsize == 8:
        return np.minimum(x, np.uint64(2 ** 62)).astype(np.int64)
    if x.dtype.kind not in "biu" and x.dtype not in (
            ml_dtypes.int4, ml_dtypes.int2, ml_dtypes.uint4, ml_dtypes.uint2):
        raise HloError(f"indices must be integers, got {x.dtype}")
    return x.astype(np.int64)


def _index_vectors(indices: np.ndarray, ivd: int) -> tuple[np.ndarray, int]:
    """Indices with the index vector dimension moved last (added when
    ivd == rank); returns (array, original rank incl. an added dim)."""
    idx = _as_index_array(indices)
    if ivd == idx.ndim:
        idx = idx[..., None]
    if not 0 <= ivd < idx.ndim:
        raise HloError(f"bad index_vector_dim {ivd}")
    return np.moveaxis(idx, ivd, -1), idx.ndim


def _batch_position(dim: int, ivd: int) -> int:
    """Position of indices dimension `dim` among the non-index-vector dims."""
    return dim - 1 if dim > ivd else dim


def _h_gather(ev, inst, ops, batch):
    operand = np.asarray(ops[0])
    a = inst.attrs
    offset_dims = tuple(a.get("offset_dims", ()))
    collapsed = tuple(a.get("collapsed_slice_dims", ()))
    start_map = tuple(a.get("start_index_map", ()))
    op_batch = tuple(a.get("operand_batching_dims", ()))
    idx_batch = tuple(a.get("start_indices_batching_dims", ()))
    ivd = a.get("index_vector_dim")
    slice_sizes = tuple(a.get("slice_sizes", ()))
    if not isinstance(ivd, int):
        raise HloError("gather needs index_vector_dim")
    rank = operand.ndim
    if len(slice_sizes) != rank:
        raise HloError("gather needs one slice size per operand dimension")
    idx, _ = _index_vectors(ops[1], ivd)
    if idx.shape[-1] != len(start_map):
        raise HloError("start_index_map does not match the index vector size")
    out_dims = inst.shape.dims
    out_rank = len(out_dims)
    batch_dims = [d for d in range(out_rank) if d not in offset_dims]
    if len(batch_dims) != idx.ndim - 1:
        raise HloError("output batch dimensions do not match the indices")
    grid = np.indices(out_dims, dtype=np.int64, sparse=True)
    grid = [np.broadcast_to(g, out_dims) for g in grid]
    batch_coords = tuple(grid[d] for d in batch_dims)
    vectors = idx[batch_coords] if batch_dims else \
        np.broadcast_to(idx, out_dims + idx.shape[-1:])
    starts: list[Any] = [np.zeros(out_dims, np.int64) for _ in range(rank)]
    for k, d in enumerate(start_map):
        starts[d] = vectors[..., k]
    for od, idd in zip(op_batch, idx_batch):
        starts[od] = batch_coords[_batch_position(idd, ivd)]
    offset_operand_dims = [d for d in range(rank)
                           if d not in collapsed and d not in op_batch]
    if len(offset_operand_dims) != len(offset_dims):
        raise HloError("offset_dims do not match the non-collapsed operand "
                       "dimensions")
    full = []
    for d in range(rank):
        s = np.clip(starts[d], 0, max(operand.shape[d] - slice_sizes[d], 0))
        if d in offset_operand_dims:
            s = s + grid[offset_dims[offset_operand_dims.index(d)]]
        full.append(s)
    return operand[tuple(full)]


def _h_scatter(ev, inst, ops, batch):
    n = (len(ops) - 1) // 2
    operands = [np.array(o, copy=True) for o in ops[:n]]
    updates = [np.asarray(u) for u in ops[n + 1:]]
    a = inst.attrs
    uwd = tuple(a.get("update_window_dims", ()))
    iwd = tuple(a.get("inserted_window_dims", ()))
    sd2od = tuple(a.get("scatter_dims_to_operand_dims", ()))
    ibd = tuple(a.get("input_batching_dims", ()))
    sibd = tuple(a.get("scatter_indices_batching_dims", ()))
    ivd = a.get("index_vector_dim")
    comp = a.get("to_apply")
    if not isinstance(ivd, int) or not isinstance(comp, HloComputation):
        raise HloError("scatter needs index_vector_dim and to_apply")
    op_shape = operands[0].shape
    rank = len(op_shape)
    idx, _ = _index_vectors(ops[n], ivd)
    if idx.shape[-1] != len(sd2od):
        raise HloError("scatter_dims_to_operand_dims does not match the "
                       "index vector size")
    upd_shape = updates[0].shape
    scatter_dims = [d for d in range(len(upd_shape)) if d not in uwd]
    scatter_shape = tuple(upd_shape[d] for d in scatter_dims)
    if scatter_shape != idx.shape[:-1]:
        raise HloError(f"update scatter dimensions {scatter_shape} do not "
                       f"match the indices {idx.shape[:-1]}")
    window_operand_dims = [d for d in range(rank)
                           if d not in iwd and d not in ibd]
    if len(window_operand_dims) != len(uwd):
        raise HloError("update_window_dims do not match the operand")
    window_sizes = [1] * rank
    for k, d in enumerate(window_operand_dims):
        window_sizes[d] = upd_shape[uwd[k]]
    count = math.prod(scatter_shape)
    wcount = math.prod(upd_shape[d] for d in uwd)
    if count == 0 or wcount == 0:
        return tuple(operands) if inst.shape.is_tuple else operands[0]
    vec = idx.reshape(count, len(sd2od))
    starts = np.zeros((count, rank), np.int64)
    for k, d in enumerate(sd2od):
        starts[:, d] = vec[:, k]
    if ibd:
        coords = np.unravel_index(np.arange(count), scatter_shape) \
            if scatter_shape else ()
        for od, sd in zip(ibd, sibd):
            starts[:, od] = coords[_batch_position(sd, ivd)]
    sizes = np.array(window_sizes, np.int64)
    valid = np.all((starts >= 0) & (starts + sizes <= np.array(op_shape)),
                   axis=1)
    # Window element offsets, in row-major order of the update window dims.
    wshape = tuple(upd_shape[d] for d in uwd)
    woff = np.zeros((wcount, rank), np.int64)
    wcoords = np.unravel_index(np.arange(wcount), wshape) if wshape else ()
    for k, d in enumerate(window_operand_dims):
        woff[:, d] = wcoords[k]
    full = starts[valid][:, None, :] + woff[None, :, :]
    linear = np.ravel_multi_index(tuple(full.reshape(-1, rank).T), op_shape) \
        if rank else np.zeros(full.shape[0] * wcount, np.int64)
    upd_vals = [np.transpose(u, scatter_dims + list(uwd))
                .reshape(count, wcount)[valid].reshape(-1) for u in updates]
    flats = [o.reshape(-1) for o in operands]
    etype = _etype_of(inst, 0)
    simple = _simple_binary(comp, etype) if n == 1 else None
    if simple == "assign":
        flats[0][linear] = upd_vals[0]
    elif simple is not None and (flats[0].dtype.kind in "biuc" or
                                 flats[0].dtype in (np.float32, np.float64)):
        ufunc = _ufunc_for(simple, etype)
        if _is_int(etype) and bit_width(etype) < 8:
            wide = _up(flats[0], etype)
            ufunc.at(wide, linear, _up(upd_vals[0], etype))
            flats[0][:] = _wrap_int(wide, etype)
        else:
            ufunc.at(flats[0], linear, upd_vals[0])
    else:
        # Rounds: the k-th update of every target element goes in round k,
        # so each round writes distinct elements and can run batched.
        order = np.argsort(linear, kind="stable")
        sorted_lin = linear[order]
        group_start = np.r_[0, np.flatnonzero(np.diff(sorted_lin)) + 1] \
            if sorted_lin.size else np.zeros(0, np.int64)
        rank_sorted = np.arange(sorted_lin.size) - np.repeat(
            group_start, np.diff(np.r_[group_start, sorted_lin.size]))
        occurrence = np.empty_like(rank_sorted)
        occurrence[order] = rank_sorted
        rounds = int(occurrence.max()) + 1 if occurrence.size else 0
        for r in range(rounds):
            sel = np.flatnonzero(occurrence == r)
            targets = linear[sel]
            old = [f[targets] for f in flats]
            new = [u[sel] for u in upd_vals]
            out = ev.apply(comp, old + new, (sel.size,))
            out = list(out) if n > 1 or comp.root.shape.is_tuple else [out]
            for f, v in zip(flats, out):
                f[targets] = v
    return tuple(operands) if inst.shape.is_tuple else operands[0]


# ---- calls


def _h_call(ev, inst, ops, batch):
    key = "calls" if inst.opcode == "fusion" else "to_apply"
    comp = inst.attrs.get(key)
    if not isinstance(comp, HloComputation):
        raise HloError(f"'{inst.opcode}' needs {key}=<computation>")
    return ev.run(comp, ops, batch)


def _h_map(ev, inst, ops, batch):
    comp = inst.attrs["to_apply"]
    if batch is not None:
        return ev.run(comp, ops, batch)
    return ev.apply(comp, [np.asarray(o) for o in ops], inst.shape.dims)


def _h_while(ev, inst, ops, batch):
    cond = inst.attrs.get("condition")
    body = inst.attrs.get("body")
    if not isinstance(cond, HloComputation) or \
            not isinstance(body, HloComputation):
        raise HloError("while needs condition= and body=")
    state = ops[0]
    while bool(np.asarray(ev.run(cond, [state]))):
        state = ev.run(body, [state])
    return state


def _h_conditional(ev, inst, ops, batch):
    selector = np.asarray(ops[0])
    if selector.dtype == np.bool_:
        branches = [inst.attrs.get("true_computation"),
                    inst.attrs.get("false_computation")]
        index = 0 if bool(selector) else 1
        if not all(isinstance(b, HloComputation) for b in branches):
            branches = inst.attrs.get("branch_computations")
    else:
        branches = inst.attrs.get("branch_computations")
        index = int(selector.astype(np.int64))
    if not branches:
        raise HloError("conditional needs its branch computations")
    if not 0 <= index < len(branches):
        index = len(branches) - 1
    return ev.run(branches[index], [ops[1 + index]])


def _h_dot(ev, inst, ops, batch):
    lhs, rhs = np.asarray(ops[0]), np.asarray(ops[1])
    a = inst.attrs
    lb = tuple(a.get("lhs_batch_dims", ()))
    rb = tuple(a.get("rhs_batch_dims", ()))
    lc = tuple(a.get("lhs_contracting_dims", ()))
    rc = tuple(a.get("rhs_contracting_dims", ()))
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise HloError("dot dimension numbers do not pair up")
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    lsub = [""] * lhs.ndim
    rsub = [""] * rhs.ndim
    out = []
    for l_, r_ in zip(lb, rb):
        lsub[l_] = rsub[r_] = next(letters)
        out.append(lsub[l_])
    for l_, r_ in zip(lc, rc):
        lsub[l_] = rsub[r_] = next(letters)
    for i in range(lhs.ndim):
        if not lsub[i]:
            lsub[i] = next(letters)
            out.append(lsub[i])
    for i in range(rhs.ndim):
        if not rsub[i]:
            rsub[i] = next(letters)
            out.append(rsub[i])
    etype = inst.shape.element_type
    lt, rt = _etype_of(inst, 0), _etype_of(inst, 1)
    cdt = _compute_dtype(etype)
    x = _convert(lhs, lt, etype) if lt != etype else lhs
    y = _convert(rhs, rt, etype) if rt != etype else rhs
    spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join(out)}"
    result = np.einsum(spec, _up(x, etype).astype(cdt),
                       _up(y, etype).astype(cdt))
    return _down(result, etype)


def _h_after_all(ev, inst, ops, batch):
    return np.zeros((0,), np.uint8)


_HANDLERS: dict[str, Callable] = {op: _h_elementwise for op in _ELEMENTWISE}
_HANDLERS.update({
    "constant": _h_constant,
    "tuple": _h_tuple,
    "get-tuple-element": _h_gte,
    "broadcast": _h_broadcast,
    "reshape": _h_reshape,
    "bitcast": _h_bitcast,
    "transpose": _h_transpose,
    "optimization-barrier": _h_copy_like,
    "slice": _h_slice,
    "dynamic-slice": _h_dynamic_slice,
    "dynamic-update-slice": _h_dynamic_update_slice,
    "pad": _h_pad,
    "concatenate": _h_concatenate,
    "reverse": _h_reverse,
    "iota": _h_iota,
    "reduce": _h_reduce,
    "reduce-window": _h_reduce_window,
    "gather": _h_gather,
    "scatter": _h_scatter,
    "call": _h_call,
    "fusion": _h_call,
    "map": _h_map,
    "while": _h_while,
    "conditional": _h_conditional,
    "dot": _h_dot,
    "after-all": _h_after_all,
})

SUPPORTED_OPCODES = frozenset(_HANDLERS) | {"parameter"}

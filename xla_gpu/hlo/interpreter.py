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
  transcendental functions. Integer ops wrap around. `reduce-precision`
  works on the bits of f16 / bf16 / f32 / f64 values as XLA's emitters
  do (NaNs kept), on f8 / f4 values through f16.
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
* `sort` runs the bitonic network XLA:GPU's sort runs, calling the
  comparator as it does (swap the pair (i, j) when comp(x[j], x[i])),
  batched over all rows and pairs of a step: always a permutation, also
  for a comparator that is no strict weak order (LT on keys with NaNs),
  where it gives the compiled sort's order. `is_stable=true` breaks ties
  by original index, as XLA's StableSortExpander; `is_stable=false`
  leaves equal elements in the network's order (XLA allows any). `topk`
  and XLA:CPU's "TopK" custom call order like a stable sort (ties: lower
  index first).
* `convolution` follows dim_labels, the window (stride, padding, lhs / rhs
  dilation, reversal), feature_group_count and batch_group_count, summing
  in the compute type. `rng-bit-generator` reproduces XLA's Philox4x32 and
  ThreeFry expansions bit for bit (rng_default is Philox, as on CPU and GPU).
* `custom-call` runs the Python handler registered for its target
  (`register_custom_call(target, fn)`: `fn(*operands, **attributes)`, the
  attributes decoded from a typed-FFI backend_config); XLA's own targets
  TopK, __cublas$gemm / __cublas$lt$matmul and the single-device identities
  Sharding / SPMDFullToShardShape / SPMDShardToFullShape are built in.
  XLA:GPU's cuDNN convolutions (forward, backward input / filter as the
  adjoints of the convolution their window and dim_labels describe,
  bias + activation) are built in too.
* async-start / async-done and copy-start / copy-done pairs of scheduled
  dumps run at the start op.
* Values above MAX_ELEMENTS elements are refused before they are allocated.
"""

from __future__ import annotations

import math
import warnings
from operator import attrgetter
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

from ..errors import ArgumentError
from .convolution import (CUDNN_CONV_TARGETS, ConvolutionGeometry, conv_geometry,
                          cudnn_activation, cudnn_backend_config, cudnn_operand_count,
                          forward_dims)
from .cublas import activation as cublas_activation
from .cublas import cublas_gemm
from .graph import post_order
from .module import HloComputation, HloError, HloInstruction, HloModule
from .opcodes import SMALL_FLOAT_TYPES
from .shape import ELEMENT_TYPES, Shape, bit_width

__all__ = ["evaluate", "register_custom_call", "unregister_custom_call",
           "registered_custom_calls", "decode_ffi_attributes", "handler_attributes",
           "call_handler"]

Value = Any  # np.ndarray or tuple of Values

_SMALL_FLOATS = SMALL_FLOAT_TYPES
_SEQUENTIAL_REDUCE_LIMIT = 1024
# The most elements one value (an instruction's result, or a buffer an op
# builds on the way: a padded convolution input) may hold: values compute in
# 8-byte types, so this bounds a single array at 4 GiB. Checked before
# allocating, so that an oversized module is an error naming the
# instruction rather than a MemoryError deep inside numpy.
MAX_ELEMENTS = 1 << 29


def evaluate(module_or_computation: HloModule | HloComputation,
             *args: np.ndarray) -> tuple[np.ndarray, ...]:
    """Evaluates the ENTRY computation of a module (or the given computation)
    on numpy inputs. Returns the result leaves, depth first.

    Raises ArgumentError (a ValueError) for arguments that do not match the
    parameters (count, shape or dtype; the message names the parameter) and
    HloError for instructions the interpreter cannot evaluate."""
    if isinstance(module_or_computation, HloModule):
        comp = module_or_computation.entry
    elif isinstance(module_or_computation, HloComputation):
        comp = module_or_computation
    else:
        raise ArgumentError("evaluate() takes an HloModule or HloComputation, "
                            f"got {type(module_or_computation).__name__}")
    params = comp.parameters
    if len(args) != len(params):
        raise ArgumentError(f"computation '{comp.name}' takes {len(params)} "
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
            raise ArgumentError(f"{label}: expected a tuple of "
                                f"{len(shape.tuple_shapes)} arrays for {shape}")
        return tuple(_check_argument(param, a, s, f"{where}[{i}]")
                     for i, (a, s) in enumerate(zip(arg, shape.tuple_shapes)))
    if shape.element_type == "token":
        return np.zeros((0,), np.uint8)
    try:
        arr = np.asarray(arg)
    except Exception as e:  # ragged lists, objects numpy cannot convert
        raise ArgumentError(f"{label}: not an array ({type(arg).__name__}: "
                            f"{e})") from None
    if arr.dtype != shape.dtype:
        raise ArgumentError(f"{label}: expected dtype {shape.dtype} "
                            f"({shape.element_type}), got {arr.dtype}")
    if arr.shape != shape.dims:
        raise ArgumentError(f"{label}: expected shape {shape.dims} "
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
        if sbits != dbits:
            raise HloError(f"bitcast-convert {src} -> {dst} is not supported")
        if not _is_int(src):    # a 4-bit float: its code, as unsigned bits
            x, src = np.ascontiguousarray(x).view(np.uint8) & ((1 << sbits) - 1), \
                f"u{sbits}"
        if not _is_int(dst):
            return np.ascontiguousarray(_bits_unsigned(x, src).astype(np.uint8)) \
                .view(ELEMENT_TYPES[dst]).reshape(out_dims)
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
    if bit_width(etype) < 8:   # f4 codes fill part of a byte: order their f32 values
        x = x.astype(np.float32)
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
    "optimization-barrier", "opt-barrier"})


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
        for inst in post_order([comp.root], attrgetter("operands")):
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
            raise inst.unsupported(f"opcode '{inst.opcode}' is not supported by the "
                             "reference interpreter")
        for leaf in inst.shape.leaves():
            count = leaf.num_elements * (math.prod(batch) if batch else 1)
            if count > MAX_ELEMENTS:
                raise inst.error(f"the result {leaf} holds {count} elements, "
                                 f"more than the interpreter's limit of "
                                 f"{MAX_ELEMENTS}")
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


def _check_elements(what: str, dims) -> None:
    """Refuses an intermediate buffer of more than MAX_ELEMENTS."""
    count = math.prod(int(d) for d in dims)
    if count > MAX_ELEMENTS:
        raise HloError(f"{what} would hold {count} elements, more than the "
                       f"interpreter's limit of {MAX_ELEMENTS}")


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


def _h_bitcast(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    src_shape = inst.operands[0].shape
    src, dst = src_shape.element_type, inst.shape.element_type
    if batch is not None:  # scalars: only the element type can change
        return x if src == dst else _bitcast_convert(x, src, dst, x.shape)
    buf = src_shape.physical_from_logical(x).reshape(-1)   # memory order
    if src != dst:
        if src_shape.num_elements * bit_width(src) != \
                inst.shape.num_elements * bit_width(dst):
            raise HloError(f"bitcast from {src_shape} to {inst.shape} "
                           "changes the byte size")
        buf = _bitcast_convert(buf, src, dst, (inst.shape.num_elements,))
    elif buf.size != inst.shape.num_elements:
        raise HloError(f"bitcast from {src_shape} to {inst.shape} changes "
                       "the element count")
    return inst.shape.logical_from_physical(buf.reshape(inst.shape.physical_shape().dims))


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
    size, stride, pad, base_dil, win_dil = _window_fields(window, inputs[0].ndim)
    out_leaves = inst.shape.leaves()
    out_dims = out_leaves[0].dims
    padded = []
    for x, init in zip(inputs, inits):
        # Base dilation, then padding (negative padding crops), with init.
        dil_shape = [max((d - 1) * b + 1, 0) for d, b in zip(x.shape, base_dil)]
        grown = [max(lo, 0) + d + max(hi, 0)
                 for (lo, hi), d in zip(pad, dil_shape)]
        _check_elements("the dilated, padded operand", grown)
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
        _combine_at(ev, comp, flats, linear, upd_vals)
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


def _dot_general(lhs: np.ndarray, rhs: np.ndarray, lt: str, rt: str,
                 etype: str, lb: Sequence[int], rb: Sequence[int],
                 lc: Sequence[int], rc: Sequence[int]) -> np.ndarray:
    """dot_general of lhs (of type lt) and rhs (rt) into `etype`, in the
    compute type of `etype` (not yet rounded): batch dimensions first, then
    lhs's free dimensions, then rhs's."""
    lb, rb, lc, rc = tuple(lb), tuple(rb), tuple(lc), tuple(rc)
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise HloError("dot dimension numbers do not pair up")
    for dims, rank, what in ((lb + lc, lhs.ndim, "lhs"),
                             (rb + rc, rhs.ndim, "rhs")):
        if len(set(dims)) != len(dims) or any(not 0 <= d < rank
                                              for d in dims):
            raise HloError(f"bad {what} dot dimensions {list(dims)} for rank "
                           f"{rank}")
    for l_, r_ in zip(lb + lc, rb + rc):
        if lhs.shape[l_] != rhs.shape[r_]:
            raise HloError(f"lhs dimension {l_} ({lhs.shape[l_]}) does not "
                           f"match rhs dimension {r_} ({rhs.shape[r_]})")
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
    cdt = _compute_dtype(etype)
    x = _convert(lhs, lt, etype) if lt != etype else lhs
    y = _convert(rhs, rt, etype) if rt != etype else rhs
    spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join(out)}"
    return np.einsum(spec, _up(x, etype).astype(cdt),
                     _up(y, etype).astype(cdt))


def _h_dot(ev, inst, ops, batch):
    a = inst.attrs
    etype = inst.shape.element_type
    result = _dot_general(
        np.asarray(ops[0]), np.asarray(ops[1]), _etype_of(inst, 0),
        _etype_of(inst, 1), etype, a.get("lhs_batch_dims", ()),
        a.get("rhs_batch_dims", ()), a.get("lhs_contracting_dims", ()),
        a.get("rhs_contracting_dims", ()))
    return _down(result, etype)


# ---- sort / topk


def _comparator_args(lhs: list[np.ndarray], rhs: list[np.ndarray]) -> list:
    """Comparator arguments: lhs0, rhs0, lhs1, rhs1, ..."""
    out: list[np.ndarray] = []
    for a, b in zip(lhs, rhs):
        out += [a, b]
    return out


def _comparator_less(ev, comp: HloComputation, lhs: list[np.ndarray],
                     rhs: list[np.ndarray]) -> np.ndarray:
    """comp(lhs, rhs) on arrays of equal shape: whether lhs goes first."""
    shape = lhs[0].shape
    if not math.prod(shape):
        return np.zeros(shape, bool)
    out = ev.apply(comp, _comparator_args(lhs, rhs), shape)
    if isinstance(out, tuple):
        raise HloError(f"the comparator '{comp.name}' returns a tuple, "
                       "not a pred")
    return np.asarray(out).astype(bool, copy=False)


def _network_masks(n: int) -> list[int]:
    """The xor masks of the bitonic sorting network over n elements, in
    the order its steps run: for stage s, first the "flip" mask
    2^(s+1) - 1 (a block of 2^(s+1) compared against itself reversed),
    then 2^m for m = s-1 .. 0. This form sorts without ascending and
    descending halves, so every step swaps towards the same order."""
    stages = max(n - 1, 0).bit_length()
    masks = []
    for stage in range(stages):
        masks.append((2 << stage) - 1)
        masks.extend(1 << m for m in range(stage - 1, -1, -1))
    return masks


def _sort_permutation(ev, comp: HloComputation, keys: list[np.ndarray],
                      stable: bool) -> np.ndarray:
    """The order XLA:GPU's sort gives the rows of `keys` (arrays of shape
    [B, n], sorted along the last axis) under the comparator `comp`, as
    an index array of shape [B, n].

    It runs the bitonic network the GPU sort runs: each step compares
    every pair (i, j = i ^ mask) with i < j < n and swaps it when the
    element at j goes first, i.e. comp(x[j], x[i]) (pairs with j past the
    end are skipped, as if padded with elements that sort last). A
    network only ever swaps, so the result is a permutation for any
    comparator, including ones that are no strict weak order (an LT
    compare of keys with NaNs): then the order is the network's, the
    same the compiled sort gives. For a strict weak order it is sorted.

    `stable`: as XLA's StableSortExpander, elements for which comp gives
    the same answer both ways round (equal under a strict weak order) are
    ordered by their original index, which makes the sort stable.
    Without it equal elements end up in the network's order, one of the
    orders XLA allows for is_stable=false.

    Every step is one batched comparator evaluation (two when stable)
    over all rows and the step's pairs (about n/2): ceil(log2 n) *
    (ceil(log2 n) + 1) / 2 steps."""
    rows, n = keys[0].shape
    perm = np.broadcast_to(np.arange(n, dtype=np.int64), (rows, n)).copy()
    if n <= 1 or rows == 0:
        return perm
    current = [np.array(k, copy=True) for k in keys]
    position = np.arange(n, dtype=np.int64)
    for mask in _network_masks(n):
        partner = position ^ mask
        lower = (position < partner) & (partner < n)
        i, j = position[lower], partner[lower]
        at_i = [c[:, i] for c in current]
        at_j = [c[:, j] for c in current]
        # The element at j goes first: swap.
        swap = _comparator_less(ev, comp, at_j, at_i)
        if stable:
            backwards = _comparator_less(ev, comp, at_i, at_j)
            swap = np.where(swap == backwards, perm[:, j] < perm[:, i], swap)
        for arr, (xi, xj) in zip(current + [perm],
                                 list(zip(at_i, at_j)) + [(perm[:, i], perm[:, j])]):
            arr[:, i] = np.where(swap, xj, xi)
            arr[:, j] = np.where(swap, xi, xj)
    return perm


def _sort_along(ev, comp: HloComputation, arrays: list[np.ndarray],
                dim: int, stable: bool) -> list[np.ndarray]:
    """`arrays` (one shape) sorted along `dim` by the comparator."""
    moved = [np.moveaxis(a, dim, -1) for a in arrays]
    lead = moved[0].shape[:-1]
    n = moved[0].shape[-1]
    rows = [m.reshape(-1, n) for m in moved]
    perm = _sort_permutation(ev, comp, rows, stable)
    return [np.moveaxis(np.take_along_axis(r, perm, axis=1)
                        .reshape(lead + (n,)), -1, dim) for r in rows]


def _h_sort(ev, inst, ops, batch):
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, HloComputation):
        raise HloError("sort needs to_apply=<comparator>")
    arrays = [np.asarray(o) for o in ops]
    if not arrays:
        raise HloError("sort needs at least one operand")
    rank = arrays[0].ndim
    dims = inst.attrs.get("dimensions", ())
    if not isinstance(dims, tuple) or len(dims) != 1 or \
            not 0 <= dims[0] < max(rank, 1):
        raise HloError(f"sort needs dimensions={{d}} with 0 <= d < {rank}")
    if any(a.shape != arrays[0].shape for a in arrays):
        raise HloError("sort operands differ in shape")
    if len(comp.parameters) != 2 * len(arrays):
        raise HloError(f"the comparator '{comp.name}' takes "
                       f"{len(comp.parameters)} parameters; {len(arrays)} "
                       f"operands need {2 * len(arrays)}")
    if rank == 0 or arrays[0].size == 0:
        out = [a.copy() for a in arrays]
    else:
        stable = inst.attrs.get("is_stable", False)
        stable = stable is True or str(stable).lower() == "true"
        out = _sort_along(ev, comp, arrays, dims[0], stable)
    return tuple(out) if inst.shape.is_tuple else out[0]


def _order_key(x: np.ndarray, etype: str) -> np.ndarray:
    """int64 keys ordering values of `etype` as XLA's TopK does (floats by
    IEEE totalOrder, -NaN first, NaN last)."""
    if _is_float(etype):
        return _total_order_key(x, etype)
    if etype == "pred":
        return np.asarray(x).astype(np.int64)
    if etype == "u64":  # order-preserving map of uint64 onto int64
        return (np.asarray(x).astype(np.uint64) ^ np.uint64(1 << 63)) \
            .view(np.int64)
    if _is_int(etype):
        return _up(x, etype).astype(np.int64)
    raise HloError(f"top-k of {etype} values is not supported")


def _topk(x: np.ndarray, etype: str, k: int, largest: bool,
          index_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[-1] if x.ndim else 0
    if x.ndim == 0 or not 0 <= k <= n:
        raise HloError(f"top-k needs 0 <= k <= the last dimension; k={k}, "
                       f"operand shape {list(x.shape)}")
    key = _order_key(x, etype)
    # Descending keys via bitwise not (no overflow); ties: lower index first.
    order = np.argsort(~key if largest else key, axis=-1, kind="stable")
    order = order[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(index_dtype)


def _h_topk(ev, inst, ops, batch):
    k = inst.attrs.get("k")
    k = int(k) if isinstance(k, (int, str)) and str(k).lstrip("-").isdigit() \
        else None
    leaves = inst.shape.leaves()
    if k is None or len(leaves) != 2:
        raise HloError("topk needs k=<int> and a (values, indices) result")
    largest = inst.attrs.get("largest", True)
    if isinstance(largest, str):
        largest = largest == "true"
    values, indices = _topk(np.asarray(ops[0]), _etype_of(inst, 0), k,
                            bool(largest), leaves[1].dtype)
    return values, indices


def _custom_topk(ev, inst, ops) -> Value:
    """XLA:CPU's "TopK" custom call: (values, s32 indices) of the k first
    elements along the last dimension under the comparator computation
    (called with value and index pairs, or values alone: see hlo.topk)."""
    comps = inst.attrs.get("called_computations") or []
    leaves = inst.shape.leaves()
    if len(ops) != 1 or len(comps) != 1 or len(leaves) != 2:
        raise HloError("the TopK custom call takes one operand, one "
                       "comparator computation and returns (values, "
                       "indices)")
    x = np.asarray(ops[0])
    k = leaves[0].dims[-1] if leaves[0].dims else 0
    if x.ndim == 0 or k > x.shape[-1]:
        raise HloError(f"TopK: k={k} exceeds the last dimension of "
                       f"{list(x.shape)}")
    iota = np.broadcast_to(np.arange(x.shape[-1], dtype=leaves[1].dtype),
                           x.shape)
    # Ties: lower index first (XLA's TopK is stable).
    from .topk import value_index_comparator   # also over values alone
    values, indices = _sort_along(ev, value_index_comparator(comps[0]),
                                  [x, np.asarray(iota)],
                                  x.ndim - 1, stable=True)
    return values[..., :k].copy(), indices[..., :k].copy()


# ---- custom calls: XLA's own targets, then registered Python handlers

def _custom_gemm(ev, inst, ops) -> Value:
    """XLA:GPU's cuBLAS custom calls (`__cublas$gemm`,
    `__cublas$lt$matmul`; see xla_gpu.hlo.cublas): D = act(alpha * dot(A,
    B) + beta * C + bias). The result is D, or a tuple (D, [pre-activation
    for *_AUX,] s8 workspace)."""
    target = inst.attrs.get("custom_call_target")
    gemm = cublas_gemm(inst)
    epilogue, beta, alpha = gemm.epilogue, gemm.beta, gemm.alpha
    has_bias, has_aux = gemm.epilogue_kind.bias, gemm.epilogue_kind.aux
    expected = gemm.operand_count
    if len(ops) != expected:
        raise HloError(f"{target}: {len(ops)} operands; beta={beta:g} and "
                       f"epilogue {epilogue} take {expected} (A, B"
                       f"{', C' if beta != 0 else ''}"
                       f"{', bias' if has_bias else ''})")
    leaves = inst.shape.leaves()
    out_shape = leaves[0]
    etype = out_shape.element_type
    acc = _dot_general(np.asarray(ops[0]), np.asarray(ops[1]),
                       _etype_of(inst, 0), _etype_of(inst, 1), etype,
                       gemm.lhs_batch, gemm.rhs_batch,
                       gemm.lhs_contracting, gemm.rhs_contracting)
    if acc.shape != out_shape.dims:
        raise HloError(f"{target}: the product has shape {list(acc.shape)}, "
                       f"the result is {out_shape}")
    acc = acc * (alpha if etype in ("c64", "c128") else alpha.real)
    k = 2
    if beta != 0:
        c = np.asarray(ops[k])
        if c.shape != acc.shape:
            raise HloError(f"{target}: C has shape {list(c.shape)}, the "
                           f"result {out_shape}")
        acc = acc + beta * _in_type(c, _etype_of(inst, k), etype)
        k += 1
    if has_bias:
        bias = np.asarray(ops[k])
        bias = _in_type(bias, _etype_of(inst, k), etype)
        if bias.shape not in (acc.shape, acc.shape[-1:]):
            raise HloError(f"{target}: the bias has shape {list(bias.shape)}; "
                           f"expected [{acc.shape[-1]}] for {out_shape}")
        acc = acc + bias
    pre = acc
    acc = cublas_activation(acc, gemm.epilogue_kind.activation)
    results = [_down(acc, etype)]
    if has_aux:
        if len(leaves) < 2:
            raise HloError(f"{target}: epilogue {epilogue} needs a result "
                           "tuple with the pre-activation output")
        results.append(_down(pre, leaves[1].element_type))
    if not inst.shape.is_tuple:
        return results[0]
    for leaf in leaves[len(results):]:  # the workspace
        results.append(np.zeros(leaf.dims, leaf.dtype))
    if len(results) != len(leaves):
        raise HloError(f"{target}: the result {inst.shape} does not hold D"
                       f"{', the pre-activation' if has_aux else ''} and a "
                       "workspace")
    return tuple(results)


CustomCallHandler = Callable[..., Any]
_CUSTOM_CALLS: dict[str, CustomCallHandler] = {}
# Handlers registered with instruction=True: fn(inst, *operands).
_INSTRUCTION_CUSTOM_CALLS: dict[str, CustomCallHandler] = {}


def _custom_identity(ev, inst, ops) -> Value:
    """Sharding annotations: on one device the value itself."""
    if len(ops) != 1:
        raise HloError(f"'{inst.attrs.get('custom_call_target')}' takes one "
                       "operand")
    return ops[0]


# XLA's own targets, evaluated here unless a handler is registered for them.
_BUILTIN_CUSTOM_CALLS = {"TopK": _custom_topk, "__cublas$gemm": _custom_gemm,
                         "__cublas$lt$matmul": _custom_gemm,
                         "Sharding": _custom_identity,
                         "SPMDFullToShardShape": _custom_identity,
                         "SPMDShardToFullShape": _custom_identity}


def register_custom_call(target: str, fn: CustomCallHandler, *,
                         instruction: bool = False) -> None:
    """Makes `fn` the reference implementation of custom calls to
    `target`: `fn(*operands, **attributes)` gets numpy arrays (a tuple
    operand as a tuple of arrays) and the attributes decoded from the
    typed-FFI `backend_config` (`{scale = 2.0 : f32, mode = 1 : i32}` ->
    scale=np.float32(2.0), mode=np.int32(1)); an older-API custom call gets
    `backend_config=<str>` when it has one. It returns the result array, or
    a sequence of arrays for a tuple result. A later registration of the
    same target replaces the earlier one.

    `instruction=True`: `fn(inst, *operands)` gets the custom-call
    instruction itself (its result shape, backend_config, api_version)
    and decodes what it needs (how `xla_gpu.ffi` bridges FFI handlers
    into the interpreter)."""
    if not isinstance(target, str) or not target:
        raise ValueError("register_custom_call needs a non-empty target name")
    if not callable(fn):
        raise TypeError(f"the handler of '{target}' is not callable")
    _INSTRUCTION_CUSTOM_CALLS.pop(target, None)
    _CUSTOM_CALLS.pop(target, None)
    (_INSTRUCTION_CUSTOM_CALLS if instruction else _CUSTOM_CALLS)[target] = fn


def unregister_custom_call(target: str) -> None:
    """Forgets the handler of `target` (no error when there is none)."""
    _CUSTOM_CALLS.pop(target, None)
    _INSTRUCTION_CUSTOM_CALLS.pop(target, None)


def registered_custom_calls() -> tuple[str, ...]:
    """The targets with a registered Python handler."""
    return tuple(sorted({*_CUSTOM_CALLS, *_INSTRUCTION_CUSTOM_CALLS}))


_MLIR_INT_TYPES = {"i1": np.bool_, "i8": np.int8, "i16": np.int16,
                   "i32": np.int32, "i64": np.int64, "si8": np.int8,
                   "si16": np.int16, "si32": np.int32, "si64": np.int64,
                   "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32,
                   "ui64": np.uint64}
_MLIR_FLOAT_TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16,
                     "f32": np.float32, "f64": np.float64}
_ATTR_MAX_DEPTH = 64


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
            if type_name in _MLIR_FLOAT_TYPES:
                dtype = _MLIR_FLOAT_TYPES[type_name]
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
        dtype = _MLIR_INT_TYPES.get(type_name) or \
            _MLIR_FLOAT_TYPES.get(type_name)
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
        dtype = _MLIR_INT_TYPES.get(etype) or _MLIR_FLOAT_TYPES.get(etype)
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


def _result_like(value: Any, shape: Shape, target: str,
                 where: str = "") -> Value:
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or \
                len(value) != len(shape.tuple_shapes):
            raise HloError(f"the handler of '{target}' returned "
                           f"{type(value).__name__}{where}; the result is "
                           f"{shape}")
        return tuple(_result_like(v, s, target, f"{where}[{i}]")
                     for i, (v, s) in enumerate(zip(value, shape.tuple_shapes)))
    arr = np.asarray(value)
    if arr.shape != shape.dims:
        raise HloError(f"the handler of '{target}' returned shape "
                       f"{list(arr.shape)}{where}; the result is {shape}")
    if arr.dtype != shape.dtype:
        if not np.can_cast(arr.dtype, shape.dtype, "same_kind"):
            raise HloError(f"the handler of '{target}' returned {arr.dtype}"
                           f"{where}; the result is {shape}")
        arr = arr.astype(shape.dtype)
    return arr


def _h_custom_call(ev, inst, ops, batch):
    target = inst.attrs.get("custom_call_target")
    if not isinstance(target, str) or not target:
        raise HloError("custom-call needs custom_call_target=\"...\"")
    handler = _CUSTOM_CALLS.get(target)
    if handler is None and target not in _INSTRUCTION_CUSTOM_CALLS and \
            target not in _BUILTIN_CUSTOM_CALLS:
        from ..ffi import jaxlib_targets   # jax's own cpu targets, from jaxlib
        jaxlib_targets.provide(target, "cpu")
    if handler is None and target in _INSTRUCTION_CUSTOM_CALLS:
        with_inst = _INSTRUCTION_CUSTOM_CALLS[target]
        result = call_handler(lambda *args: with_inst(inst, *args), target, ops)
        return _result_like(result, inst.shape, target)
    if handler is None and target in _BUILTIN_CUSTOM_CALLS:
        return _BUILTIN_CUSTOM_CALLS[target](ev, inst, ops)
    if handler is None:
        known = ", ".join(registered_custom_calls()) or "none"
        from ..ffi import jaxlib_targets
        raise HloError(f"no handler for the custom call target '{target}' "
                       "(register one with xla_gpu.hlo.interpreter."
                       f"register_custom_call; registered: {known})"
                       f"{jaxlib_targets.missing_hint(target)}")
    config = inst.attrs.get("backend_config", "")
    kwargs = handler_attributes(target, str(inst.attrs.get("api_version", "")),
                                config if isinstance(config, str) else "")
    return _result_like(call_handler(handler, target, ops, kwargs), inst.shape, target)


def handler_attributes(target: str, api_version: str, backend_config: str) -> dict[str, Any]:
    """The keyword arguments a Python custom-call handler gets: the
    attributes decoded from a typed-FFI backend_config, or
    backend_config=<text> for the older APIs."""
    if api_version == "API_VERSION_TYPED_FFI":
        return decode_ffi_attributes(backend_config, f"custom call '{target}'")
    return {"backend_config": backend_config} if backend_config else {}


def call_handler(handler: Callable[..., Any], target: str, operands: Sequence[Value],
                 kwargs: dict[str, Any] | None = None) -> Any:
    """Calls a Python custom-call handler on copies of its operands (a tuple
    operand as a tuple), so that it cannot change the caller's values; its
    own failure becomes an HloError naming the target."""
    args = [tuple(np.array(v, copy=True) for v in o) if isinstance(o, tuple)
            else np.array(o, copy=True) for o in operands]
    try:
        return handler(*args, **(kwargs or {}))
    except HloError:
        raise
    except Exception as e:  # the handler's own failure, named
        raise HloError(f"the handler of custom call target '{target}' "
                       f"failed: {type(e).__name__}: {e}") from e


# ---- convolution


def _conv_geometry(inst: HloInstruction, lhs_dims, rhs_dims,
                   out_dims) -> ConvolutionGeometry:
    """The checked geometry of a convolution (or a cuDNN convolution custom
    call) with this (forward) input, kernel and output, refused when its
    dilated, padded input would be too large to hold."""
    geom = conv_geometry(inst, lhs_dims, rhs_dims, out_dims)
    _check_elements("the dilated, padded input", _padded_layout(geom)[0])
    return geom


def _padded_layout(geom: ConvolutionGeometry):
    """(the dilated input's canonical shape padded, where the input lands in
    it (dilation strides included), the crop of negative padding)."""
    dil = [max((d - 1) * b + 1, 0) for d, b in zip(geom.in_spatial, geom.lhs_dilation)]
    grown = [max(lo, 0) + d + max(hi, 0)
             for lo, hi, d in zip(geom.pad_lo, geom.pad_hi, dil)]
    place = (slice(None), slice(None)) + tuple(
        slice(max(lo, 0), max(lo, 0) + d, b)
        for lo, d, b in zip(geom.pad_lo, dil, geom.lhs_dilation))
    crop = (slice(None), slice(None)) + tuple(
        slice(max(-lo, 0), g - max(-hi, 0))
        for lo, hi, g in zip(geom.pad_lo, geom.pad_hi, grown))
    return (geom.batch, geom.features, *grown), place, crop


def _padded_input(x: np.ndarray, geom: ConvolutionGeometry) -> np.ndarray:
    """The canonical input dilated and padded (negative padding cropped)."""
    padded_dims, place, crop = _padded_layout(geom)
    buf = np.zeros(padded_dims, x.dtype)
    buf[place] = x
    return buf[crop]


def _windows(geom: ConvolutionGeometry):
    """(kernel offset, the index of the padded input it multiplies)."""
    out = geom.out_spatial
    for k in np.ndindex(*geom.size):
        yield k, (slice(None), slice(None)) + tuple(
            slice(k[d] * geom.rhs_dilation[d],
                  k[d] * geom.rhs_dilation[d] + (out[d] - 1) * geom.stride[d]
                  + 1, geom.stride[d]) for d in range(len(out)))


def _to_canonical(x: np.ndarray, labels) -> np.ndarray:
    major, minor, spatial = labels
    return np.transpose(x, [major, minor, *spatial])


def _from_canonical(x: np.ndarray, labels) -> np.ndarray:
    major, minor, spatial = labels
    return np.transpose(x, np.argsort([major, minor, *spatial]))


def _oriented_kernel(w: np.ndarray, geom: ConvolutionGeometry) -> np.ndarray:
    for d, r in enumerate(geom.reversal):
        if r:
            w = np.flip(w, axis=2 + d)
    return w


def _conv_forward(x: np.ndarray, w: np.ndarray,
                  geom: ConvolutionGeometry) -> np.ndarray:
    """out[n, o, p] = sum over the window and the group's input features
    of the dilated, padded input times the kernel (canonical arrays)."""
    n_in, c_in, i_feat = geom.batch, geom.features, geom.group_features
    n_out, o_feat = geom.out_batch, geom.out_features
    points = math.prod(geom.out_spatial)
    bg, g = geom.batch_groups, geom.groups
    padded = _padded_input(x, geom)
    w = _oriented_kernel(w, geom)
    acc = np.zeros((n_out, o_feat, points), x.dtype)
    if points and acc.size:
        for k, index in _windows(geom):
            v = padded[index].reshape(n_in, c_in, points)
            wk = w[(slice(None), slice(None)) + k]
            if bg > 1:
                part = np.einsum("gncp,goc->ngop",
                                 v.reshape(bg, n_out, c_in, points),
                                 wk.reshape(bg, o_feat // bg, i_feat))
            else:
                part = np.einsum("ngcp,goc->ngop",
                                 v.reshape(n_in, g, i_feat, points),
                                 wk.reshape(g, o_feat // g, i_feat))
            acc += part.reshape(n_out, o_feat, points)
    return acc.reshape(geom.out_dims)


def _conv_backward_input(dy: np.ndarray, w: np.ndarray,
                         geom: ConvolutionGeometry) -> np.ndarray:
    """The adjoint of _conv_forward in its input: the gradient of the
    input given the output's (cuDNN's backward-input convolution)."""
    n_in, c_in, i_feat = geom.batch, geom.features, geom.group_features
    n_out, o_feat = geom.out_batch, geom.out_features
    points = math.prod(geom.out_spatial)
    bg, g = geom.batch_groups, geom.groups
    padded_dims, place, crop = _padded_layout(geom)
    grad_buf = np.zeros(padded_dims, dy.dtype)
    grad = grad_buf[crop]
    w = _oriented_kernel(w, geom)
    dy = dy.reshape(n_out, o_feat, points)
    if points and dy.size:
        for k, index in _windows(geom):
            wk = w[(slice(None), slice(None)) + k]
            if bg > 1:
                part = np.einsum("ngop,goc->gncp",
                                 dy.reshape(n_out, bg, o_feat // bg, points),
                                 wk.reshape(bg, o_feat // bg, i_feat))
            else:
                part = np.einsum("ngop,goc->ngcp",
                                 dy.reshape(n_out, g, o_feat // g, points),
                                 wk.reshape(g, o_feat // g, i_feat))
            grad[index] += part.reshape((n_in, c_in) + geom.out_spatial)
    return np.array(grad_buf[place], copy=True)


def _conv_backward_filter(x: np.ndarray, dy: np.ndarray,
                          geom: ConvolutionGeometry) -> np.ndarray:
    """The adjoint of _conv_forward in its kernel: the gradient of the
    kernel given the input and the output's gradient (cuDNN's
    backward-filter convolution)."""
    n_in, c_in, i_feat = geom.batch, geom.features, geom.group_features
    n_out, o_feat = geom.out_batch, geom.out_features
    points = math.prod(geom.out_spatial)
    bg, g = geom.batch_groups, geom.groups
    padded = _padded_input(x, geom)
    dy = dy.reshape(n_out, o_feat, points)
    dw = np.zeros(geom.kernel_dims, x.dtype)
    if points and dy.size:
        for k, index in _windows(geom):
            v = padded[index].reshape(n_in, c_in, points)
            if bg > 1:
                part = np.einsum("gncp,ngop->goc",
                                 v.reshape(bg, n_out, c_in, points),
                                 dy.reshape(n_out, bg, o_feat // bg, points))
            else:
                part = np.einsum("ngcp,ngop->goc",
                                 v.reshape(n_in, g, i_feat, points),
                                 dy.reshape(n_out, g, o_feat // g, points))
            dw[(slice(None), slice(None)) + k] = part.reshape(o_feat, i_feat)
    return _oriented_kernel(dw, geom)


def _in_type(value: np.ndarray, src: str, etype: str) -> np.ndarray:
    """`value` (of type src) converted to `etype`'s compute type."""
    return _up(_convert(value, src, etype) if src != etype else value, etype)


def _h_convolution(ev, inst, ops, batch):
    lhs, rhs = np.asarray(ops[0]), np.asarray(ops[1])
    out_shape = inst.shape
    geom = _conv_geometry(inst, lhs.shape, rhs.shape, out_shape.dims)
    etype = out_shape.element_type
    x = _to_canonical(_in_type(lhs, _etype_of(inst, 0), etype), geom.lhs)
    w = _to_canonical(_in_type(rhs, _etype_of(inst, 1), etype), geom.rhs)
    return _down(_from_canonical(_conv_forward(x, w, geom), geom.out), etype)


def _custom_cudnn_conv(ev, inst, ops) -> Value:
    """XLA:GPU's cuDNN convolution custom calls. Their window and dim_labels
    describe the forward convolution (input `lhs`, kernel `rhs`, output
    `out` labels): convForward computes it; convBackwardInput takes (output
    gradient, kernel) and returns the input gradient; convBackwardFilter
    takes (input, output gradient) and returns the kernel gradient;
    convBiasActivationForward takes (input, kernel, bias[, side input]) and
    returns act(conv_result_scale * conv + side_input_scale * side + bias).
    The result is a tuple (value, u8 workspace) or the value alone."""
    target = str(inst.attrs.get("custom_call_target"))
    kind = CUDNN_CONV_TARGETS[target]
    config = cudnn_backend_config(inst)
    leaves = inst.shape.leaves()
    result_shape = leaves[0]
    etype = result_shape.element_type
    arrays = [np.asarray(o) for o in ops]
    needed = cudnn_operand_count(kind)
    if len(arrays) not in needed:
        raise HloError(f"{target} takes {' or '.join(map(str, needed))} "
                       f"operands, got {len(arrays)}")
    geom = _conv_geometry(inst, *forward_dims(kind, [a.shape for a in arrays],
                                              result_shape.dims))

    def operand(k: int, labels) -> np.ndarray:
        return _to_canonical(_in_type(arrays[k], _etype_of(inst, k), etype),
                             labels)
    if kind == "backward_input":
        value = _from_canonical(_conv_backward_input(
            operand(0, geom.out), operand(1, geom.rhs), geom), geom.lhs)
    elif kind == "backward_filter":
        value = _from_canonical(_conv_backward_filter(
            operand(0, geom.lhs), operand(1, geom.out), geom), geom.rhs)
    else:
        value = _conv_forward(operand(0, geom.lhs), operand(1, geom.rhs), geom)
    value = value * float(config.get("conv_result_scale", 1))
    if kind in ("forward", "bias_activation"):
        if kind == "bias_activation":
            bias = _in_type(arrays[2], _etype_of(inst, 2), etype)
            if bias.shape != (geom.out_features,):
                raise HloError(f"{target}: the bias has shape "
                               f"{list(bias.shape)}, expected "
                               f"[{geom.out_features}] (output features)")
            if len(arrays) == 4:
                side = operand(3, geom.out)
                if side.shape != value.shape:
                    raise HloError(f"{target}: the side input does not have "
                                   "the output's shape")
                value = value + float(config.get("side_input_scale", 0)) * side
            value = value + bias.reshape((1, -1) + (1,) * (value.ndim - 2))
        act = cudnn_activation(inst, config)
        if act == "relu":
            value = np.maximum(value, 0)
        elif act == "relu6":
            value = np.clip(value, 0, 6)
        elif act == "sigmoid":
            value = 1 / (1 + np.exp(-value))
        elif act == "tanh":
            value = np.tanh(value)
        elif act == "elu":
            value = np.where(value > 0, value, np.expm1(value))
        elif act == "leaky_relu":
            alpha = float(config.get("leakyrelu_alpha", 0))
            value = np.where(value > 0, value, alpha * value)
        elif act == "gelu":
            value = 0.5 * value * (1 + _erf(value / np.sqrt(2)))
        value = _from_canonical(value, geom.out)
    result = _down(value, etype)
    if not inst.shape.is_tuple:
        return result
    return (result,) + tuple(np.zeros(leaf.dims, leaf.dtype)
                             for leaf in leaves[1:])


_BUILTIN_CUSTOM_CALLS.update({t: _custom_cudnn_conv for t in CUDNN_CONV_TARGETS})


# ---- select-and-scatter


def _window_fields(window: dict, rank: int) -> tuple:
    """(size, stride, pad, base dilation, window dilation) of a window
    over a rank-`rank` operand, defaults where a field is absent."""
    size = tuple(window.get("size", (1,) * rank))
    stride = tuple(window.get("stride", (1,) * rank))
    pad = list(window.get("pad", [(0, 0)] * rank))
    base_dil = tuple(window.get("lhs_dilate", (1,) * rank))
    win_dil = tuple(window.get("rhs_dilate", (1,) * rank))
    if not all(len(t) == rank for t in (size, stride, pad, base_dil, win_dil)):
        raise HloError("window fields do not match the operand rank")
    return size, stride, pad, base_dil, win_dil


def _windows_of(x: np.ndarray, window: dict, fill) -> tuple:
    """The padded operand, its validity mask and the window geometry
    (size, stride, dilation) of a reduce-window-like op."""
    size, stride, pad, base_dil, win_dil = _window_fields(window, x.ndim)
    if any(b != 1 for b in base_dil):
        raise HloError("select-and-scatter with base dilation is not "
                       "supported")
    grown = [max(lo, 0) + d + max(hi, 0) for (lo, hi), d in zip(pad, x.shape)]
    _check_elements("the padded operand", grown)
    buf = np.full(grown, fill, dtype=x.dtype)
    valid = np.zeros(grown, bool)
    index = np.full(grown, -1, np.int64)
    place = tuple(slice(max(lo, 0), max(lo, 0) + d)
                  for (lo, _), d in zip(pad, x.shape))
    buf[place] = x
    valid[place] = True
    index[place] = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    crop = tuple(slice(max(-lo, 0), g - max(-hi, 0))
                 for (lo, hi), g in zip(pad, grown))
    return buf[crop], valid[crop], index[crop], size, stride, win_dil


def _combine_at(ev, comp: HloComputation, flats: list[np.ndarray],
                targets: np.ndarray, values: list[np.ndarray]) -> None:
    """flats[t] = comp(flats[t], v) for the (target, value) pairs in order
    (several flats for a variadic combiner). The k-th update of every target
    goes in round k, so each round writes distinct elements and runs
    batched; repeated targets are combined in their order."""
    if targets.size == 0:
        return
    order = np.argsort(targets, kind="stable")
    sorted_t = targets[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_t)) + 1]
    ranks_sorted = np.arange(sorted_t.size) - np.repeat(
        starts, np.diff(np.r_[starts, sorted_t.size]))
    occurrence = np.empty_like(ranks_sorted)
    occurrence[order] = ranks_sorted
    is_tuple = len(flats) > 1 or comp.root.shape.is_tuple
    for r in range(int(occurrence.max()) + 1):
        sel = np.flatnonzero(occurrence == r)
        t = targets[sel]
        out = ev.apply(comp, [f[t] for f in flats] + [v[sel] for v in values],
                       (sel.size,))
        for f, v in zip(flats, list(out) if is_tuple else [out]):
            f[t] = v


def _h_select_and_scatter(ev, inst, ops, batch):
    operand, source, init = (np.asarray(o) for o in ops)
    select = inst.attrs.get("select")
    scatter = inst.attrs.get("scatter")
    if not isinstance(select, HloComputation) or \
            not isinstance(scatter, HloComputation):
        raise HloError("select-and-scatter needs select= and scatter= "
                       "computations")
    window = inst.attrs.get("window", {})
    if not isinstance(window, dict):
        raise HloError("select-and-scatter needs window={size=...}")
    padded, valid, index, size, stride, dil = _windows_of(
        operand, window, np.zeros((), operand.dtype))
    out_dims = source.shape
    if len(out_dims) != operand.ndim:
        raise HloError("the source's rank differs from the operand's")
    sel_val = np.zeros(out_dims, operand.dtype)
    sel_idx = np.full(out_dims, -1, np.int64)
    have = np.zeros(out_dims, bool)
    # XLA's order: the window's elements in row-major order; a candidate
    # replaces the current choice when select(current, candidate) is false.
    for w in np.ndindex(*size):
        view = tuple(slice(wi * wd, wi * wd + (o - 1) * s + 1, s)
                     if o else slice(0, 0)
                     for wi, wd, o, s in zip(w, dil, out_dims, stride))
        cand, cvalid, cidx = padded[view], valid[view], index[view]
        if cand.shape != out_dims:
            raise HloError(f"the window does not fit: {list(cand.shape)} vs "
                           f"the source {list(out_dims)}")
        keep = np.asarray(ev.apply(select, [sel_val, cand], out_dims),
                          bool) if have.any() else np.zeros(out_dims, bool)
        take = cvalid & (~have | ~keep)
        sel_val = np.where(take, cand, sel_val)
        sel_idx = np.where(take, cidx, sel_idx)
        have |= cvalid
    result = np.array(np.broadcast_to(init, operand.shape), copy=True)
    flat = result.reshape(-1)
    chosen = sel_idx.reshape(-1)
    ok = chosen >= 0
    if _simple_binary(scatter, _etype_of(inst, 0)) == "assign":
        flat[chosen[ok]] = source.reshape(-1)[ok]
    else:
        _combine_at(ev, scatter, [flat], chosen[ok], [source.reshape(-1)[ok]])
    return result


# ---- rng-bit-generator

_MASK32 = np.uint64(0xFFFFFFFF)


def _philox4x32(c: list[np.ndarray], key: tuple[int, int]) -> list:
    """Philox4x32-10 on 32-bit words held in uint64 arrays."""
    k0 = np.uint64(key[0])
    k1 = np.uint64(key[1])
    c0, c1, c2, c3 = c
    for _ in range(10):
        p0 = c0 * np.uint64(0xD2511F53)
        p1 = c2 * np.uint64(0xCD9E8D57)
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _MASK32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _MASK32)
        k0 = (k0 + np.uint64(0x9E3779B9)) & _MASK32
        k1 = (k1 + np.uint64(0xBB67AE85)) & _MASK32
    return [c0, c1, c2, c3]


def _philox_words(count: int, key: int, low: int,
                  high: int) -> tuple[list[np.ndarray], int, int]:
    """At least `count` random 32-bit words, in ceil(count / 4) Philox
    blocks of the 128-bit counters (high:low) + 0, 1, ...; returns the four
    word arrays of the blocks (the caller interleaves them) and the counter
    after the last block, as (low, high)."""
    blocks = -(-count // 4)
    step = np.arange(blocks, dtype=np.uint64)
    lows = np.uint64(low) + step
    highs = np.where(lows < np.uint64(low), np.uint64((high + 1) % 2**64),
                     np.uint64(high))
    words = [lows & _MASK32, lows >> np.uint64(32), highs & _MASK32,
             highs >> np.uint64(32)]
    out = _philox4x32(words, (key & 0xFFFFFFFF, key >> 32))
    new_low = (low + blocks) % 2**64
    new_high = (high + (1 if new_low < low else 0)) % 2**64
    return out, new_low, new_high


def _rotl32(v: np.ndarray, r: int) -> np.ndarray:
    return (v << np.uint32(r)) | (v >> np.uint32(32 - r))


def _threefry2x32(x0: np.ndarray, x1: np.ndarray,
                  key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Threefry2x32 with 20 rounds on uint32 arrays."""
    ks = [np.uint32(key[0]), np.uint32(key[1]),
          np.uint32(0x1BD11BDA ^ key[0] ^ key[1])]
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = x0 + x1
            x1 = _rotl32(x1, r) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _threefry_bits32(key: int, state: int, dims: tuple[int, ...]):
    """XLA's ThreeFry bits of u32 `dims`: the counters are the row-major
    indices of a half-size shape; the two output words fill the split
    dimension's even and odd positions."""
    if not dims:
        half, split = (1,), None
    else:
        split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
        if split is None:
            split = max(range(len(dims)), key=lambda i: (dims[i], -i))
        half = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]
    count = math.prod(half)
    counters = np.uint64(state) + np.arange(count, dtype=np.uint64)
    lo = (counters & _MASK32).astype(np.uint32)
    hi = (counters >> np.uint64(32)).astype(np.uint32)
    o0, o1 = _threefry2x32(lo, hi, (key & 0xFFFFFFFF, key >> 32))
    new_state = (state + count) % 2**64
    if split is None:
        return o0.reshape(()), new_state
    o0, o1 = o0.reshape(half), o1.reshape(half)
    both = np.stack([o0, o1], axis=split + 1)
    merged = both.reshape(dims[:split] + (2 * half[split],) +
                          dims[split + 1:])
    return merged[tuple(slice(0, d) for d in dims)], new_state


def _h_rng_bit_generator(ev, inst, ops, batch):
    state = np.asarray(ops[0])
    leaves = inst.shape.leaves()
    if not inst.shape.is_tuple or len(leaves) != 2 or \
            state.dtype != np.uint64 or state.ndim != 1 or state.size < 2:
        raise HloError("rng-bit-generator takes a u64[n >= 2] state and "
                       "returns (state, bits)")
    algorithm = str(inst.attrs.get("algorithm", "rng_default")).lower()
    if algorithm == "rng_default":
        algorithm = "rng_philox"  # XLA:CPU's and XLA:GPU's default
    out_shape = leaves[1]
    etype, dims = out_shape.element_type, out_shape.dims
    bits = bit_width(etype)
    if etype == "pred" or etype in ("c64", "c128") or bits not in (
            8, 16, 32, 64):
        raise HloError(f"rng-bit-generator cannot produce {etype}")
    s = [int(v) for v in state]
    key = s[0]
    count = math.prod(dims)
    new_state = state.copy()
    if algorithm == "rng_philox":
        low, high = (s[1], s[2]) if state.size >= 3 else (s[1], s[0])
        per = 2 if bits == 64 else 1
        words, new_low, new_high = _philox_words(count * per, key, low, high)
        if bits == 64:
            pairs = [words[0] | (words[1] << np.uint64(32)),
                     words[2] | (words[3] << np.uint64(32))]
            flat = np.stack(pairs, axis=1).reshape(-1)[:count]
        else:
            flat = np.stack(words, axis=1).reshape(-1)[:count]
        new_state[1] = new_low
        if state.size >= 3:
            new_state[2] = new_high
        raw = flat.reshape(dims)
    elif algorithm == "rng_three_fry":
        if bits == 64:
            counters = np.uint64(s[1]) + np.arange(count, dtype=np.uint64)
            lo = (counters & _MASK32).astype(np.uint32)
            hi = (counters >> np.uint64(32)).astype(np.uint32)
            o0, o1 = _threefry2x32(lo, hi, (key & 0xFFFFFFFF, key >> 32))
            raw = (o0.astype(np.uint64) |
                   (o1.astype(np.uint64) << np.uint64(32))).reshape(dims)
            new_state[1] = (s[1] + count) % 2**64
        else:
            raw, next_state = _threefry_bits32(key, s[1], dims)
            new_state[1] = next_state
    else:
        raise HloError(f"unknown rng algorithm '{algorithm}'")
    unsigned = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
    raw = np.asarray(raw).astype(np.uint64) if bits < 64 else np.asarray(raw)
    out = (raw & np.uint64((1 << bits) - 1)).astype(unsigned) \
        if bits < 64 else raw.astype(np.uint64)
    if out_shape.dtype != out.dtype:
        out = out.view(out_shape.dtype)
    return new_state, np.asarray(out).reshape(dims)


def _h_rng(ev, inst, ops, batch):
    raise HloError("'rng' draws from an unspecified generator: its results "
                   "cannot be reproduced (use rng-bit-generator)")


# ---- fft


def _h_fft(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    kind = str(inst.attrs.get("fft_type", "")).upper()
    lengths = tuple(inst.attrs.get("fft_length", ()))
    if not 1 <= len(lengths) <= 3 or len(lengths) > x.ndim:
        raise HloError(f"fft needs fft_length of 1 to 3 sizes over the last "
                       f"dimensions, got {list(lengths)} for rank {x.ndim}")
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    out_dtype = inst.shape.dtype
    src = _etype_of(inst, 0)
    if kind in ("FFT", "IFFT"):
        if src not in ("c64", "c128") or x.shape[-len(lengths):] != lengths:
            raise HloError(f"{kind} needs a complex operand whose last "
                           f"dimensions are {list(lengths)}")
        fn = np.fft.fftn if kind == "FFT" else np.fft.ifftn
        out = fn(x.astype(np.complex128), s=lengths, axes=axes)
    elif kind == "RFFT":
        if not _is_float(src) or x.shape[-len(lengths):] != lengths:
            raise HloError(f"RFFT needs a real operand whose last "
                           f"dimensions are {list(lengths)}")
        out = np.fft.rfftn(_up(x, src), s=lengths, axes=axes)
    elif kind == "IRFFT":
        expected = lengths[:-1] + (lengths[-1] // 2 + 1,)
        if src not in ("c64", "c128") or x.shape[-len(lengths):] != expected:
            raise HloError(f"IRFFT needs a complex operand whose last "
                           f"dimensions are {list(expected)}")
        out = np.fft.irfftn(x.astype(np.complex128), s=lengths, axes=axes)
    else:
        raise HloError(f"unknown fft_type '{kind}' (FFT, IFFT, RFFT, IRFFT)")
    return np.asarray(out).astype(out_dtype)


# ---- asynchronous pairs (XLA:GPU's scheduled dumps)


def _context_leaves(shapes: Sequence[Shape]) -> tuple:
    return tuple(np.zeros(s.dims, s.dtype) if not s.is_tuple
                 else _context_leaves(s.tuple_shapes) for s in shapes)


def _h_async_start(ev, inst, ops, batch):
    """async-start runs its computation at once: the value is (operands,
    result, context), as XLA's async shape spells it."""
    comp = inst.attrs.get("calls")
    if isinstance(comp, list) and len(comp) == 1:
        comp = comp[0]
    if not isinstance(comp, HloComputation):
        raise HloError("async-start needs calls=<computation>")
    shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else []
    if len(shapes) < 2:
        raise HloError(f"async-start's shape {inst.shape} is not (operands, "
                       "result, context...)")
    result = ev.run(comp, ops)
    return (tuple(ops), result) + _context_leaves(shapes[2:])


def _h_async_update(ev, inst, ops, batch):
    return ops[0]


def _h_async_done(ev, inst, ops, batch):
    state = ops[0]
    if not isinstance(state, tuple) or len(state) < 2:
        raise HloError("async-done needs the value of an async-start")
    return state[1]


def _h_copy_start(ev, inst, ops, batch):
    """copy-start: (destination, source, context); the copy is immediate."""
    shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else []
    if len(shapes) < 2:
        raise HloError(f"copy-start's shape {inst.shape} is not "
                       "(destination, source, context)")
    return (np.array(ops[0], copy=True), ops[0]) + \
        _context_leaves(shapes[2:])


def _h_first_element(ev, inst, ops, batch):
    state = ops[0]
    if not isinstance(state, tuple) or not state:
        raise HloError(f"{inst.opcode} needs the tuple of its start op")
    return state[0]


def _h_get_dimension_size(ev, inst, ops, batch):
    dims = inst.attrs.get("dimensions", ())
    x = np.asarray(ops[0])
    if not isinstance(dims, tuple) or len(dims) != 1 or \
            not 0 <= dims[0] < x.ndim:
        raise HloError(f"get-dimension-size needs dimensions={{d}} with "
                       f"0 <= d < {x.ndim}")
    return np.asarray(x.shape[dims[0]], inst.shape.dtype)


def _h_device_id(ev, inst, ops, batch):
    """replica-id / partition-id: the interpreter runs one device, 0."""
    return np.zeros((), inst.shape.dtype)


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
    "sort": _h_sort,
    "topk": _h_topk,
    "custom-call": _h_custom_call,
    "convolution": _h_convolution,
    "select-and-scatter": _h_select_and_scatter,
    "rng-bit-generator": _h_rng_bit_generator,
    "rng": _h_rng,
    "fft": _h_fft,
    "async-start": _h_async_start,
    "async-update": _h_async_update,
    "async-done": _h_async_done,
    "copy-start": _h_copy_start,
    "copy-done": _h_first_element,
    "add-dependency": _h_copy_like,
    "domain": _h_copy_like,
    "get-dimension-size": _h_get_dimension_size,
    "replica-id": _h_device_id,
    "partition-id": _h_device_id,
    "opt-barrier": _h_copy_like,
})

SUPPORTED_OPCODES = frozenset(_HANDLERS) | {"parameter"}

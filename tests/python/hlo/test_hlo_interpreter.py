"""The numpy reference interpreter (xla_gpu.hlo.interpreter): op-by-op XLA
semantics where numpy differs, and whole modules printed by JAX."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from xla_gpu.hlo import (ELEMENT_TYPES, HloError, evaluate, parse_file,
                         parse_module)

INPUTS = Path(__file__).resolve().parents[1] / "hlo_inputs"
BF16, F8E4M3FN, F8E5M2 = (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                          ml_dtypes.float8_e5m2)
_TYPE_NAMES = {v: k for k, v in ELEMENT_TYPES.items()}
I32_MIN, I32_MAX = -2**31, 2**31 - 1


def hlo_type(array) -> str:
    return _TYPE_NAMES[np.asarray(array).dtype]


def shape_of(array, etype=None) -> str:
    a = np.asarray(array)
    return f"{etype or hlo_type(a)}[{','.join(map(str, a.shape))}]"


def run(text: str, *args):
    """Evaluates `text`; numpy must not warn (XLA semantics, not numpy's)."""
    module = parse_module(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return evaluate(module, *args)


def op(opcode: str, *args, out: str | None = None, attrs: str = ""):
    """One elementwise instruction applied to the arguments."""
    params = "\n".join(f"  p{i} = {shape_of(a)} parameter({i})"
                       for i, a in enumerate(args))
    result = out or shape_of(args[0])
    if out and "[" not in out:
        result = shape_of(args[0], out)
    operands = ", ".join(f"p{i}" for i in range(len(args)))
    text = (f"ENTRY e {{\n{params}\n  ROOT r = {result} "
            f"{opcode}({operands}){', ' + attrs if attrs else ''}\n}}\n")
    (value,) = run(text, *[np.asarray(a) for a in args])
    return value


def same(actual, expected):
    """Bitwise-equal values (NaNs and signed zeros included)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape
    if actual.dtype.kind == "f" or actual.dtype in (BF16, F8E4M3FN, F8E5M2):
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        assert np.array_equal(np.isnan(a), np.isnan(e)), (actual, expected)
        mask = ~np.isnan(a)
        assert np.array_equal(a[mask], e[mask]), (actual, expected)
        assert np.array_equal(np.signbit(a[mask]), np.signbit(e[mask])), \
            (actual, expected)
    else:
        assert np.array_equal(actual, expected), (actual, expected)


# ------------------------------------------------------------- integers


def test_integer_divide_and_remainder():
    a = np.array([7, -7, 7, -7, 5, I32_MIN, I32_MIN, 0], np.int32)
    b = np.array([2, 2, -2, -2, 0, -1, 0, 0], np.int32)
    same(op("divide", a, b),
         np.array([3, -3, -3, 3, -1, I32_MIN, -1, -1], np.int32))
    same(op("remainder", a, b),
         np.array([1, -1, 1, -1, 5, 0, I32_MIN, 0], np.int32))
    u = np.array([7, 200, 0, 255], np.uint8)
    v = np.array([2, 0, 0, 16], np.uint8)
    same(op("divide", u, v), np.array([3, 255, 255, 15], np.uint8))
    same(op("remainder", u, v), np.array([1, 200, 0, 15], np.uint8))
    s64 = np.array([-2**63, -2**63, 9], np.int64)
    same(op("divide", s64, np.array([-1, 0, -4], np.int64)),
         np.array([-2**63, -1, -2], np.int64))
    same(op("remainder", s64, np.array([-1, 0, -4], np.int64)),
         np.array([0, -2**63, 1], np.int64))


def test_integer_wraparound():
    a = np.array([I32_MAX, I32_MIN, 65536, -3], np.int32)
    b = np.array([1, 1, 65536, 2], np.int32)
    same(op("add", a, b), np.array([I32_MIN, I32_MIN + 1, 131072, -1],
                                   np.int32))
    same(op("subtract", a, b), np.array([I32_MAX - 1, I32_MAX, 0, -5],
                                        np.int32))
    same(op("multiply", a, b), np.array([I32_MAX, I32_MIN, 0, -6], np.int32))
    same(op("negate", a), np.array([-I32_MAX, I32_MIN, -65536, 3], np.int32))
    same(op("abs", a), np.array([I32_MAX, I32_MIN, 65536, 3], np.int32))
    u = np.array([250, 3], np.uint8)
    same(op("add", u, np.array([10, 5], np.uint8)), np.array([4, 8], np.uint8))
    same(op("subtract", u, np.array([251, 5], np.uint8)),
         np.array([255, 254], np.uint8))
    same(op("negate", u), np.array([6, 253], np.uint8))
    s4 = np.array([7, -8, 3], ml_dtypes.int4)
    same(op("add", s4, np.array([1, -1, 3], ml_dtypes.int4)),
         np.array([-8, 7, 6], ml_dtypes.int4))
    u64 = np.array([2**64 - 1], np.uint64)
    same(op("multiply", u64, u64), np.array([1], np.uint64))


def test_shifts():
    a = np.array([1, -8, -8, 1, -1, 0x40000000, 5, -5], np.int32)
    n = np.array([31, 1, 33, 32, -1, 1, 0, 40], np.int32)
    same(op("shift-left", a, n),
         np.array([I32_MIN, -16, 0, 0, 0, I32_MIN, 5, 0], np.int32))
    same(op("shift-right-logical", a, n),
         np.array([0, 0x7FFFFFFC, 0, 0, 0, 0x20000000, 5, 0], np.int32))
    same(op("shift-right-arithmetic", a, n),
         np.array([0, -4, -1, 0, -1, 0x20000000, 5, -1], np.int32))
    u = np.array([0x80, 0x81, 3, 0xFF], np.uint8)
    k = np.array([1, 8, 7, 255], np.uint8)
    same(op("shift-left", u, k), np.array([0, 0, 0x80, 0], np.uint8))
    same(op("shift-right-logical", u, k), np.array([0x40, 0, 0, 0], np.uint8))
    # Arithmetic shifts of unsigned values fill with the top bit.
    same(op("shift-right-arithmetic", u, k),
         np.array([0xC0, 0xFF, 0, 0xFF], np.uint8))


def test_mulhi_is_the_high_half_of_the_double_width_product():
    a = np.array([I32_MAX, I32_MIN, I32_MIN, -1, 65536, 3], np.int32)
    b = np.array([I32_MAX, I32_MIN, I32_MAX, 1, 65536, -2], np.int32)
    # (2^31-1)^2 >> 32, 2^62 >> 32, -2^31 (2^31-1) >> 32, -1 >> 32 (floor),
    # 2^32 >> 32, -6 >> 32.
    same(op("mulhi", a, b),
         np.array([0x3FFFFFFF, 0x40000000, -0x40000000, -1, 1, -1], np.int32))
    u = np.array([0xFF, 0x80, 16, 15], np.uint8)
    v = np.array([0xFF, 2, 16, 17], np.uint8)
    same(op("mulhi", u, v), np.array([0xFE, 1, 1, 0], np.uint8))
    u64 = np.array([2**64 - 1, 2**63, 2**40, 3], np.uint64)
    same(op("mulhi", u64, u64), np.array([2**64 - 2, 2**62, 2**16, 0], np.uint64))
    s64 = np.array([-2**63, -2**63, 2**63 - 1, -3], np.int64)
    t64 = np.array([-2**63, 2**63 - 1, 2**63 - 1, 5], np.int64)
    same(op("mulhi", s64, t64), np.array([2**62, -2**62, 2**62 - 1, -1], np.int64))
    s4 = np.array([-8, -8, 7, -1], ml_dtypes.int4)
    same(op("mulhi", s4, np.array([-8, 7, 7, 1], ml_dtypes.int4)),
         np.array([4, -4, 3, -1], ml_dtypes.int4))
    with pytest.raises(HloError, match="mulhi"):
        op("mulhi", np.array([1.0], np.float32), np.array([2.0], np.float32))


def test_integer_power():
    base = np.array([2, -1, -1, 1, 0, 0, 3, -2, 5, 2], np.int32)
    exp_ = np.array([10, -3, -2, -5, 0, -1, 40, 3, -1, 31], np.int32)
    expected = [1024, -1, 1, 1, 1, 0, (3**40 + 2**31) % 2**32 - 2**31, -8, 0,
                I32_MIN]
    same(op("power", base, exp_), np.array(expected, np.int32))
    same(op("power", np.array([3, 0], np.uint8), np.array([5, 0], np.uint8)),
         np.array([243, 1], np.uint8))


def test_bit_counting_and_not():
    a = np.array([0, 1, -1, 0x00F0, I32_MIN], np.int32)
    same(op("popcnt", a), np.array([0, 1, 32, 4, 1], np.int32))
    same(op("count-leading-zeros", a), np.array([32, 31, 0, 24, 0], np.int32))
    same(op("not", a), np.array([-1, -2, 0, ~0xF0, I32_MAX], np.int32))
    u = np.array([0, 1, 0x80, 0xFF], np.uint8)
    same(op("count-leading-zeros", u), np.array([8, 7, 0, 0], np.uint8))
    same(op("popcnt", u), np.array([0, 1, 1, 8], np.uint8))
    same(op("not", np.array([True, False])), np.array([False, True]))
    s4 = np.array([-1, 1, 0], ml_dtypes.int4)
    same(op("count-leading-zeros", s4), np.array([0, 3, 4], ml_dtypes.int4))
    same(op("sign", np.array([-5, 0, 9], np.int32)),
         np.array([-1, 0, 1], np.int32))


def test_bitwise_and_logical():
    a = np.array([0b1100, -1], np.int32)
    b = np.array([0b1010, 5], np.int32)
    same(op("and", a, b), np.array([0b1000, 5], np.int32))
    same(op("or", a, b), np.array([0b1110, -1], np.int32))
    same(op("xor", a, b), np.array([0b0110, -6], np.int32))
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    same(op("and", p, q), np.array([True, False, False, False]))
    same(op("or", p, q), np.array([True, True, True, False]))
    same(op("xor", p, q), np.array([False, True, True, False]))


# ------------------------------------------------------------ floats

NAN = np.float32(np.nan)


def test_maximum_minimum_propagate_nan():
    a = np.array([NAN, 1, NAN, -0.0, 0.0, 2, -np.inf], np.float32)
    b = np.array([1, NAN, NAN, 0.0, -0.0, 3, 1], np.float32)
    same(op("maximum", a, b),
         np.array([NAN, NAN, NAN, 0.0, 0.0, 3, 1], np.float32))
    same(op("minimum", a, b),
         np.array([NAN, NAN, NAN, -0.0, -0.0, 2, -np.inf], np.float32))
    h = a.astype(BF16)
    same(op("maximum", h, b.astype(BF16)),
         np.array([NAN, NAN, NAN, 0.0, 0.0, 3, 1], BF16))


def test_rounding():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.3, 3.7, NAN,
                  np.inf, 8388609], np.float32)
    same(op("round-nearest-afz", x),
         np.array([1, 2, 3, -1, -3, 0, -0.0, 4, NAN, np.inf, 8388609],
                  np.float32))
    same(op("round-nearest-even", x),
         np.array([0, 2, 2, -0.0, -2, 0, -0.0, 4, NAN, np.inf, 8388609],
                  np.float32))
    same(op("floor", x[:8]), np.floor(x[:8]))
    same(op("ceil", x[:8]), np.ceil(x[:8]))


def test_sign_keeps_nan_and_negative_zero():
    x = np.array([NAN, -0.0, 0.0, -3, 1e-40, np.inf], np.float32)
    same(op("sign", x), np.array([NAN, -0.0, 0.0, -1, 1, 1], np.float32))


def test_float_remainder_divide_power():
    a = np.array([7.5, -7.5, 1, 0, 2, NAN, 1], np.float32)
    b = np.array([2, 2, 0, 0, -1, 0, NAN], np.float32)
    with np.errstate(all="ignore"):
        expected = np.fmod(a, b)
    same(op("remainder", a, b), expected)
    with np.errstate(all="ignore"):
        same(op("divide", a, b), a / b)
    same(op("power", a, b),
         np.array([7.5**2, 7.5**2, 1, 1, 0.5, 1, 1], np.float32))


def test_transcendental_functions():
    x = np.array([-2.0, -0.5, 0.0, 0.3, 1.0, 3.0], np.float32)
    xd = x.astype(np.float64)
    checks = {
        "exponential": np.exp(xd), "exponential-minus-one": np.expm1(xd),
        "tanh": np.tanh(xd), "logistic": 1 / (1 + np.exp(-xd)),
        "sine": np.sin(xd), "cosine": np.cos(xd), "tan": np.tan(xd),
        "erf": np.array([math.erf(v) for v in xd]), "cbrt": np.cbrt(xd),
    }
    for opcode, expected in checks.items():
        same(op(opcode, x), expected.astype(np.float32))
    pos = np.array([0.25, 1, 2, 100], np.float32)
    same(op("log", pos), np.log(pos.astype(np.float64)).astype(np.float32))
    same(op("log-plus-one", pos), np.log1p(pos.astype(np.float64))
         .astype(np.float32))
    same(op("sqrt", pos), np.sqrt(pos))
    same(op("rsqrt", pos), (1 / np.sqrt(pos.astype(np.float64)))
         .astype(np.float32))
    same(op("atan2", x, pos[[0, 1, 2, 3, 0, 1]]),
         np.arctan2(xd, pos[[0, 1, 2, 3, 0, 1]].astype(np.float64))
         .astype(np.float32))
    same(op("is-finite", np.array([1, np.inf, NAN, -np.inf], np.float32),
            out="pred"), np.array([True, False, False, False]))


def test_16_bit_floats_compute_in_f32_and_round_each_op():
    a = np.array([256, 1, 3], BF16)
    b = np.array([1, 2**-9, 5], BF16)
    same(op("add", a, b), np.array([256, 1, 8], BF16))  # 257 -> 256 (even)
    text = """
ENTRY e {
  a = bf16[3] parameter(0)
  b = bf16[3] parameter(1)
  s = bf16[3] add(a, b)
  ROOT t = bf16[3] add(s, b)
}
"""
    (out,) = run(text, a, b)
    # Rounded after each add: 256 + 1 -> 256, + 1 -> 256 again.
    assert out[0] == 256
    x = np.linspace(-3, 3, 50).astype(BF16)
    expected = np.exp(x.astype(np.float32)).astype(BF16)
    same(op("exponential", x), expected)
    h = np.linspace(-3, 3, 50).astype(np.float16)
    same(op("tanh", h), np.tanh(h.astype(np.float32)).astype(np.float16))
    f8 = np.array([1, 2, 448], F8E4M3FN)
    same(op("multiply", f8, np.array([1.5, 3, 2], F8E4M3FN)),
         np.array([1.5, 6, np.nan], F8E4M3FN))  # e4m3fn: overflow is NaN
    e5 = np.array([1, 57344], F8E5M2)
    same(op("add", e5, e5), np.array([2, np.inf], F8E5M2))


def test_compare():
    a = np.array([1, NAN, NAN, -0.0, 2], np.float32)
    b = np.array([1, 1, NAN, 0.0, 1], np.float32)
    expected = {
        "EQ": [True, False, False, True, False],
        "NE": [False, True, True, False, True],
        "LT": [False, False, False, False, False],
        "LE": [True, False, False, True, False],
        "GT": [False, False, False, False, True],
        "GE": [True, False, False, True, True],
    }
    for direction, values in expected.items():
        same(op("compare", a, b, out="pred", attrs=f"direction={direction}"),
             np.array(values))
    u = np.array([200, 1], np.uint8)
    same(op("compare", u, np.array([100, 2], np.uint8), out="pred",
            attrs="direction=GT"), np.array([True, False]))


def test_compare_total_order():
    order = np.array([-np.nan, -np.inf, -1, -0.0, 0.0, 2e-38, 1, np.inf,
                      np.nan], np.float32)
    order[0] = -np.abs(order[0])  # negative NaN
    n = len(order)
    a = np.repeat(order, n)
    b = np.tile(order, n)
    ia, ib = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    for direction, fn in [("LT", np.less), ("EQ", np.equal),
                          ("GE", np.greater_equal), ("NE", np.not_equal)]:
        same(op("compare", a, b, out="pred",
                attrs=f"direction={direction}, type=TOTALORDER"), fn(ia, ib))
    h = order.astype(BF16)
    same(op("compare", np.repeat(h, n), np.tile(h, n), out="pred",
            attrs="direction=LT, type=TOTALORDER"), np.less(ia, ib))


def test_select_and_clamp():
    p = np.array([True, False, True])
    same(op("select", p, np.array([1, 2, 3], np.int32),
            np.array([4, 5, 6], np.int32), out="s32"),
         np.array([1, 5, 3], np.int32))
    text = """
ENTRY e {
  lo = f32[] parameter(0)
  x = f32[4] parameter(1)
  hi = f32[] parameter(2)
  ROOT c = f32[4] clamp(lo, x, hi)
}
"""
    x = np.array([-5, 0.5, 5, NAN], np.float32)
    same(run(text, np.float32(-1), x, np.float32(2))[0],
         np.array([-1, 0.5, 2, NAN], np.float32))
    same(run(text, NAN, x, np.float32(2))[0], np.full(4, NAN, np.float32))
    same(op("clamp", np.array([0, 0], np.int32), np.array([-3, 9], np.int32),
            np.array([5, 5], np.int32), out="s32"),
         np.array([0, 5], np.int32))


def test_complex_ops():
    re = np.array([1, -3], np.float32)
    im = np.array([2, 4], np.float32)
    z = op("complex", re, im, out="c64")
    same(z, np.array([1 + 2j, -3 + 4j], np.complex64))
    same(op("real", z, out="f32"), re)
    same(op("imag", z, out="f32"), im)
    same(op("abs", z, out="f32"), np.array([math.sqrt(5), 5], np.float32))
    same(op("multiply", z, z), (z.astype(np.complex128) ** 2)
         .astype(np.complex64))
    same(op("exponential", z), np.exp(z.astype(np.complex128))
         .astype(np.complex64))


# ------------------------------------------------------------- convert


def test_convert_float_to_int_saturates():
    x = np.array([NAN, 1e10, -1e10, 2.9, -2.9, np.inf, -np.inf, 127.5, -128.7],
                 np.float32)
    same(op("convert", x, out="s32"),
         np.array([0, I32_MAX, I32_MIN, 2, -2, I32_MAX, I32_MIN, 127, -128],
                  np.int32))
    same(op("convert", x, out="s8"),
         np.array([0, 127, -128, 2, -2, 127, -128, 127, -128], np.int8))
    same(op("convert", x, out="u8"),
         np.array([0, 255, 0, 2, 0, 255, 0, 127, 0], np.uint8))
    same(op("convert", x, out="s64")[:3],
         np.array([0, 10**10, -10**10], np.int64))
    big = np.array([1e30, -1e30], np.float64)
    same(op("convert", big, out="s64"), np.array([2**63 - 1, -2**63], np.int64))
    same(op("convert", big, out="u64"), np.array([2**64 - 1, 0], np.uint64))
    same(op("convert", x, out="s4"),
         np.array([0, 7, -8, 2, -2, 7, -8, 7, -8], ml_dtypes.int4))


def test_convert_other_pairs():
    x = np.array([0.0, -0.0, NAN, 0.1, -2], np.float32)
    same(op("convert", x, out="pred"),
         np.array([False, False, True, True, True]))
    i = np.array([300, -129, 255, -1], np.int32)
    same(op("convert", i, out="s8"), np.array([44, 127, -1, -1], np.int8))
    same(op("convert", i, out="u8"), np.array([44, 127, 255, 255], np.uint8))
    same(op("convert", i, out="pred"), np.array([True, True, True, True]))
    same(op("convert", i, out="s4"), np.array([-4, -1, -1, -1], ml_dtypes.int4))
    same(op("convert", np.array([True, False]), out="f32"),
         np.array([1, 0], np.float32))
    f = np.array([1 + 2**-8, 1 + 3 * 2**-8, np.inf, 3.4e38], np.float32)
    same(op("convert", f, out="bf16"),
         np.array([1, 1 + 2**-6, np.inf, np.inf], BF16))  # ties to even
    same(op("convert", np.array([500, 0.3, -1e4], np.float32), out="f8e4m3fn"),
         np.array([np.nan, 0.3, np.nan], F8E4M3FN))
    same(op("convert", np.array([1e6, 0.3], np.float32), out="f8e5m2"),
         np.array([np.inf, 0.3], F8E5M2))
    same(op("convert", np.array([1.5, 448], F8E4M3FN), out="bf16"),
         np.array([1.5, 448], BF16))
    same(op("convert", np.array([2**24 + 1], np.int32), out="f32"),
         np.array([2**24], np.float32))


def test_reduce_precision():
    x = np.array([1.0, 1 + 2**-11, 1 + 3 * 2**-11, 65504, 65520, 1e-5, -3.14159,
                  np.inf, NAN, -0.0, 1e-8], np.float32)
    out = op("reduce-precision", x, attrs="exponent_bits=5, mantissa_bits=10")
    with np.errstate(over="ignore"):
        as_f16 = x.astype(np.float16).astype(np.float32)
    # f16 rounding, but values below f16's normal range flush to zero.
    as_f16[-1] = 0.0
    as_f16[5] = 0.0  # 1e-5 is an f16 denormal
    same(out, as_f16)
    bf = op("reduce-precision", x[:8], attrs="exponent_bits=8, mantissa_bits=7")
    same(bf, x[:8].astype(BF16).astype(np.float32))
    same(op("reduce-precision", np.array([3.0, 5.0, 7.0], np.float32),
            attrs="exponent_bits=8, mantissa_bits=0"),
         np.array([2.0, 4.0, 8.0], np.float32))  # ties to an even exponent


def test_bitcast_convert():
    x = np.array([1.0, -2.0, NAN], np.float32)
    same(op("bitcast-convert", x, out="s32"), x.view(np.int32))
    (b,) = run("""
ENTRY e {
  p = f32[3] parameter(0)
  ROOT b = u8[3,4] bitcast-convert(p)
}
""", x)
    same(b, x.view(np.uint8).reshape(3, 4))
    (back,) = run("""
ENTRY e {
  p = u8[3,4] parameter(0)
  ROOT b = f32[3] bitcast-convert(p)
}
""", b)
    same(back, x)
    same(op("bitcast-convert", np.array([-1, 7, -8], ml_dtypes.int4), out="u4"),
         np.array([15, 7, 8], ml_dtypes.uint4))
    same(op("bitcast-convert", np.array([1.5], BF16), out="s16"),
         np.array([1.5], BF16).view(np.int16))


# ------------------------------------------------------------- structural


def test_broadcast_transpose_reshape_reverse_iota():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (b, t, r, v, i, f) = run("""
ENTRY e {
  x = f32[2,3] parameter(0)
  b = f32[3,4,2] broadcast(x), dimensions={2,0}
  t = f32[3,2] transpose(x), dimensions={1,0}
  r = f32[3,1,2] reshape(x)
  v = f32[2,3] reverse(x), dimensions={0,1}
  i = s32[2,3] iota(), iota_dimension=1
  f = bf16[4] iota(), iota_dimension=0
  ROOT tup = (f32[3,4,2], f32[3,2], f32[3,1,2], f32[2,3], s32[2,3], bf16[4]) tuple(b, t, r, v, i, f)
}
""", x)
    same(b, np.broadcast_to(x.T[:, None, :], (3, 4, 2)).copy())
    same(t, x.T.copy())
    same(r, x.reshape(3, 1, 2))
    same(v, x[::-1, ::-1].copy())
    same(i, np.broadcast_to(np.arange(3, dtype=np.int32), (2, 3)).copy())
    same(f, np.arange(4).astype(BF16))


def test_bitcast_follows_layouts():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # A row-major f32[2,3] read back as f32[3,2]{0,1} (column-major): the
    # same bytes, so the logical result is the transpose.
    (t, r, c) = run("""
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  t = f32[3,2]{0,1} bitcast(x)
  r = f32[6]{0} bitcast(x)
  c = s32[2,3]{1,0} bitcast(x)
  ROOT tup = (f32[3,2]{0,1}, f32[6]{0}, s32[2,3]{1,0}) tuple(t, r, c)
}
""", x)
    same(t, x.T.copy())
    same(r, x.reshape(6))
    same(c, x.view(np.int32))


def test_slice_concatenate():
    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    (s, c) = run("""
ENTRY e {
  x = s32[4,5] parameter(0)
  s = s32[2,2] slice(x), slice={[1:4:2], [0:5:3]}
  y = s32[4,2] slice(x), slice={[0:4], [3:5]}
  c = s32[4,7] concatenate(x, y), dimensions={1}
  ROOT t = (s32[2,2], s32[4,7]) tuple(s, c)
}
""", x)
    same(s, x[1:4:2, 0:5:3].copy())
    same(c, np.concatenate([x, x[:, 3:5]], axis=1))


def test_dynamic_slice_clamps_start_indices():
    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    text = """
ENTRY e {
  x = s32[4,5] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  ROOT d = s32[2,3] dynamic-slice(x, i, j), dynamic_slice_sizes={2,3}
}
"""
    for i, j in [(0, 0), (1, 2), (3, 4), (-5, 100), (2**31 - 1, -2**31)]:
        ci, cj = min(max(i, 0), 2), min(max(j, 0), 2)
        same(run(text, x, np.int32(i), np.int32(j))[0], x[ci:ci + 2, cj:cj + 3])
    (u,) = run(text.replace("s32[] parameter(1)", "u8[] parameter(1)"),
               x, np.uint8(255), np.int32(1))
    same(u, x[2:4, 1:4])


def test_dynamic_update_slice_clamps_start_indices():
    x = np.zeros((4, 5), np.float32)
    upd = np.ones((2, 3), np.float32)
    text = """
ENTRY e {
  x = f32[4,5] parameter(0)
  u = f32[2,3] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT d = f32[4,5] dynamic-update-slice(x, u, i, j)
}
"""
    for i, j in [(1, 1), (3, 4), (-2, -7)]:
        ci, cj = min(max(i, 0), 2), min(max(j, 0), 2)
        expected = x.copy()
        expected[ci:ci + 2, cj:cj + 3] = 1
        same(run(text, x, upd, np.int32(i), np.int32(j))[0], expected)
    assert not x.any()  # the input is not modified


def test_pad_negative_and_interior():
    x = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    (p,) = run("""
ENTRY e {
  x = s32[2,3] parameter(0)
  c = s32[] constant(0)
  ROOT p = s32[4,4] pad(x, c), padding=1_0_1x-1_0_1
}
""", x)
    # dim 0: lo 1, interior 1 -> [0, r0, 0, r1]; dim 1: interior 1 gives
    # [a 0 b 0 c] (5), lo -1 crops the first column -> 4.
    full = np.zeros((4, 5), np.int32)
    full[1::2, 0::2] = x
    same(p, full[:, 1:])
    (q,) = run("""
ENTRY e {
  x = s32[2,3] parameter(0)
  c = s32[] constant(9)
  ROOT p = s32[1,6] pad(x, c), padding=0_-1x2_1
}
""", x)
    same(q, np.array([[9, 9, 1, 2, 3, 9]], np.int32))


def test_gather_rows_with_clamping():
    x = np.arange(18, dtype=np.float32).reshape(6, 3)
    idx = np.array([[0], [5], [-3], [9]], np.int32)
    (g,) = run("""
ENTRY e {
  x = f32[6,3] parameter(0)
  i = s32[4,1] parameter(1)
  ROOT g = f32[4,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}
}
""", x, idx)
    same(g, x[[0, 5, 0, 5], 0:2])


def test_gather_2d_windows_and_implicit_index_vector():
    x = np.arange(30, dtype=np.int32).reshape(5, 6)
    idx = np.array([[0, 0], [4, 5], [1, 3]], np.int32)
    (g,) = run("""
ENTRY e {
  x = s32[5,6] parameter(0)
  i = s32[3,2] parameter(1)
  ROOT g = s32[2,3,2] gather(x, i), offset_dims={0,2}, collapsed_slice_dims={}, start_index_map={1,0}, index_vector_dim=1, slice_sizes={2,2}
}
""", x, idx)
    # start_index_map={1,0}: index (a, b) starts at row b, column a.
    expected = np.stack([x[min(b, 3):min(b, 3) + 2, min(a, 4):min(a, 4) + 2]
                         for a, b in idx], axis=1)
    same(g, expected)
    (h,) = run("""
ENTRY e {
  x = s32[5,6] parameter(0)
  i = s32[3] parameter(1)
  ROOT g = s32[3,6] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}
}
""", x, np.array([4, 0, 2], np.int32))
    same(h, x[[4, 0, 2]])


def test_gather_batching_dims():
    x = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
    idx = np.array([[1, 4], [0, 3]], np.int32)  # per batch: 2 row indices
    (g,) = run("""
ENTRY e {
  x = f32[2,5,3] parameter(0)
  i = s32[2,2] parameter(1)
  ROOT g = f32[2,2,3] gather(x, i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,3}
}
""", x, idx)
    expected = np.stack([x[b, idx[b]] for b in range(2)])
    same(g, expected)


SCATTER_ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[6,2] parameter(0)
  i = s32[5,1] parameter(1)
  u = f32[5,2,2] parameter(2)
  ROOT s = f32[6,2] scatter(x, i, u), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""


def test_scatter_skips_out_of_bounds_windows():
    x = np.zeros((6, 2), np.float32)
    idx = np.array([[0], [4], [5], [-1], [4]], np.int32)
    upd = np.arange(1, 21, dtype=np.float32).reshape(5, 2, 2)
    (s,) = run(SCATTER_ADD, x, idx, upd)
    expected = x.copy()
    expected[0:2] += upd[0]
    expected[4:6] += upd[1] + upd[4]  # duplicates accumulate
    # index 5 (window would cover rows 5..6) and -1 are skipped entirely.
    same(s, expected)


def test_scatter_general_combiner_in_update_order():
    # A non-commutative combiner: new = 2 * old + update. Updates to the same
    # element apply in order.
    text = """
comb {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  two = s32[] constant(2)
  m = s32[] multiply(a, two)
  ROOT s = s32[] add(m, b)
}
ENTRY e {
  x = s32[4] parameter(0)
  i = s32[5] parameter(1)
  u = s32[5] parameter(2)
  ROOT s = s32[4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
}
"""
    x = np.array([1, 1, 1, 1], np.int32)
    idx = np.array([2, 0, 2, 7, 2], np.int32)
    upd = np.array([10, 20, 30, 40, 50], np.int32)
    (s,) = run(text, x, idx, upd)
    e2 = ((1 * 2 + 10) * 2 + 30) * 2 + 50
    same(s, np.array([2 + 20, 1, e2, 1], np.int32))


def test_scatter_assign_and_variadic():
    assign = """
set {
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}
ENTRY e {
  x = f32[5] parameter(0)
  i = s32[2,1] parameter(1)
  u = f32[2] parameter(2)
  ROOT s = f32[5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=set
}
"""
    (s,) = run(assign, np.zeros(5, np.float32), np.array([[3], [1]], np.int32),
               np.array([7, 8], np.float32))
    same(s, np.array([0, 8, 0, 7, 0], np.float32))
    variadic = """
pair {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = s32[] parameter(3)
  s = f32[] add(a, c)
  m = s32[] maximum(b, d)
  ROOT t = (f32[], s32[]) tuple(s, m)
}
ENTRY e {
  x = f32[3] parameter(0)
  y = s32[3] parameter(1)
  i = s32[3,1] parameter(2)
  u = f32[3] parameter(3)
  v = s32[3] parameter(4)
  ROOT s = (f32[3], s32[3]) scatter(x, y, i, u, v), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=pair
}
"""
    f, m = run(variadic, np.zeros(3, np.float32), np.zeros(3, np.int32),
               np.array([[1], [1], [2]], np.int32),
               np.array([1, 2, 4], np.float32), np.array([5, 9, -1], np.int32))
    same(f, np.array([0, 3, 4], np.float32))
    same(m, np.array([0, 9, 0], np.int32))


def test_reduce_sequential_order_and_variadic_argmax():
    x = np.array([1e8, 1, -1e8, 1], np.float32)
    (s,) = run("""
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
}
""", x)
    # ((0 + 1e8) + 1) rounds back to 1e8 in f32: sequential order gives 1.
    same(s, np.float32(1))
    module = parse_file(INPUTS / "argmax.pre.hlo")
    y = np.array([[1, 5, 5, 2, 0, 0, -1], [np.nan, 1, 2, 3, 4, 5, 6],
                  [0, 0, 0, 0, 0, 0, 0], [-np.inf] * 7,
                  [3, 2, 1, 9, 9, np.nan, 9]], np.float32)
    (am,) = evaluate(module, y)
    same(am, np.array([1, 0, 0, 0, 5], np.int32))


def test_reduce_multiple_dimensions_and_general_reducer():
    x = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    text = """
sumsq {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  m = s32[] multiply(b, b)
  ROOT s = s32[] add(a, m)
}
mx {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT m = s32[] maximum(a, b)
}
ENTRY e {
  x = s32[2,3,4] parameter(0)
  z = s32[] constant(0)
  lo = s32[] constant(-2147483648)
  a = s32[3] reduce(x, z), dimensions={0,2}, to_apply=sumsq
  b = s32[2,4] reduce(x, lo), dimensions={1}, to_apply=mx
  ROOT t = (s32[3], s32[2,4]) tuple(a, b)
}
"""
    a, b = run(text, x)
    same(a, (x.astype(np.int64) ** 2).sum(axis=(0, 2)).astype(np.int32))
    same(b, x.max(axis=1))


def test_reduce_large_is_a_tree_reduction():
    n = 1 << 20
    x = np.random.default_rng(0).integers(-50, 50, n).astype(np.int32)
    text = """
add_slow {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  one = s32[] constant(1)
  m = s32[] multiply(b, one)
  ROOT s = s32[] add(a, m)
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = s32[1048576] parameter(0)
  z = s32[] constant(0)
  q = s32[] reduce(x, z), dimensions={0}, to_apply=add_slow
  f = f32[1048576] convert(x)
  zf = f32[] constant(0)
  s = f32[] reduce(f, zf), dimensions={0}, to_apply=add
  ROOT t = (s32[], f32[]) tuple(q, s)
}
"""
    module = parse_module(text)
    q, s = evaluate(module, x)
    # add_slow is not recognised as a plain add: 2^20 elements reduce as a
    # pairwise tree (exact for integers).
    same(q, np.int32(x.sum()))
    same(s, np.float32(x.sum()))


def test_reduce_window():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (r, p) = run("""
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[3,4] parameter(0)
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  r = f32[3,2] reduce-window(x, z), window={size=1x2 stride=1x2}, to_apply=add
  p = f32[2,3] reduce-window(x, ninf), window={size=2x2 stride=2x2 pad=0_1x1_1}, to_apply=mx
  ROOT t = (f32[3,2], f32[2,3]) tuple(r, p)
}
""", x)
    same(r, x.reshape(3, 2, 2).sum(-1))
    padded = np.full((4, 6), -np.inf, np.float32)
    padded[0:3, 1:5] = x
    same(p, padded.reshape(2, 2, 3, 2).max(axis=(1, 3)))


def test_map_call_while_conditional_fusion():
    text = """
sq {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(a, a)
  ROOT s = f32[] add(m, b)
}
cond {
  t = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  t = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  v = f32[4] get-tuple-element(t), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  w = f32[4] add(v, v)
  ROOT r = (s32[], f32[4]) tuple(j, w)
}
neg {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}
ident {
  ROOT x = f32[4] parameter(0)
}
fused {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  ROOT m = f32[4] map(p, q), dimensions={0}, to_apply=sq
}
ENTRY e {
  x = f32[4] parameter(0)
  k = s32[] parameter(1)
  m = f32[4] fusion(x, x), kind=kLoop, calls=fused
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  c = f32[4] conditional(k, x, x), branch_computations={neg, ident}
  cl = f32[4] call(x), to_apply=neg
  ROOT t = (f32[4], (s32[], f32[4]), f32[4], f32[4]) tuple(m, w, c, cl)
}
"""
    x = np.array([1, -2, 3, 0.5], np.float32)
    m, i, w, c, cl = run(text, x, np.int32(0))
    same(m, x * x + x)
    same(i, np.int32(3))
    same(w, x * 8)
    same(c, -x)
    same(cl, -x)
    assert run(text, x, np.int32(1))[3].tolist() == x.tolist()
    assert run(text, x, np.int32(7))[3].tolist() == x.tolist()  # clamped


def test_dot():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    (d,) = run("""
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,4] parameter(1)
  ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""", a, b)
    same(d, a @ b)


# ------------------------------------------------------------ interface


def test_argument_validation():
    module = parse_module("""
ENTRY e {
  x = f32[2,3] parameter(0)
  y = s32[] parameter(1)
  ROOT n = f32[2,3] negate(x)
}
""")
    good = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="takes 2 arguments, got 1"):
        evaluate(module, good)
    with pytest.raises(ValueError, match=r"parameter 0 \('x'\).*dtype"):
        evaluate(module, good.astype(np.float64), np.int32(0))
    with pytest.raises(ValueError, match=r"parameter 0 \('x'\).*shape"):
        evaluate(module, np.zeros((3, 2), np.float32), np.int32(0))
    with pytest.raises(ValueError, match=r"parameter 1 \('y'\)"):
        evaluate(module, good, 0)
    (out,) = evaluate(module, good, np.int32(0))
    assert out.dtype == np.float32 and out.shape == (2, 3)
    (out2,) = evaluate(module.entry, good, np.int32(5))
    same(out2, -good)


def test_tuple_results_flatten_depth_first():
    outs = run("""
ENTRY e {
  a = f32[] constant(1)
  b = s32[2] constant({2, 3})
  c = pred[] constant(true)
  ct = (pred[]) tuple(c)
  bc = (s32[2], (pred[])) tuple(b, ct)
  ROOT t = (f32[], (s32[2], (pred[])), f32[]) tuple(a, bc, a)
}
""")
    assert len(outs) == 4
    assert [o.tolist() for o in outs] == [1.0, [2, 3], True, 1.0]
    assert all(isinstance(o, np.ndarray) for o in outs)
    assert outs[2].dtype == np.bool_


def test_unsupported_opcode_names_instruction():
    module = parse_module("""
ENTRY e {
  x = f32[4] parameter(0)
  ROOT s = f32[4] custom-call(x), custom_call_target="foo"
}
""")
    with pytest.raises(HloError, match="instruction 's' \\(custom-call\\)"):
        evaluate(module, np.zeros(4, np.float32))
    elided = parse_module("ENTRY e {\n  ROOT c = f32[3] constant({...})\n}\n")
    with pytest.raises(HloError, match="elided"):
        evaluate(elided)


# ---------------------------------------------------------- whole modules


def both(name):
    return [parse_file(INPUTS / f"{name}.{k}.hlo") for k in ("pre", "post")]


RNG = np.random.default_rng(1234)


def close(actual, expected, rtol=2e-6, atol=1e-6):
    np.testing.assert_allclose(np.asarray(actual, np.float64),
                               np.asarray(expected, np.float64),
                               rtol=rtol, atol=atol)


def test_module_gelu():
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    xd = x.astype(np.float64)
    expected = 0.5 * xd * (1 + np.tanh(0.7978845608 * (xd + 0.044715 * xd**3)))
    for module in both("gelu"):
        (out,) = evaluate(module, x)
        close(out, expected)


def test_module_seed_gelu_bf16():
    text = (INPUTS / "seed_gelu.hlo").read_text().replace("6,512,4096", "2,8,16")
    x = RNG.standard_normal((2, 8, 16)).astype(BF16)
    (out,) = evaluate(parse_module(text), x)
    xd = x.astype(np.float64)
    expected = xd * 0.5 * (1 + np.tanh(0.79785 * (xd + 0.044708 * xd**3)))
    assert out.dtype == BF16
    close(out, expected, rtol=3e-2, atol=3e-2)


def test_module_softmax():
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    for module in both("softmax"):
        (out,) = evaluate(module, x)
        close(out, e / e.sum(axis=1, keepdims=True))


def test_module_layer_norm():
    x = RNG.standard_normal((8, 32)).astype(np.float32)
    g = RNG.standard_normal(32).astype(np.float32)
    b = RNG.standard_normal(32).astype(np.float32)
    mean = x.mean(axis=1, keepdims=True, dtype=np.float64)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    expected = (x - mean) / np.sqrt(var + 1e-5) * g + b
    for module in both("layer_norm"):
        (out,) = evaluate(module, x, g, b)
        close(out, expected, rtol=1e-5, atol=1e-5)


def test_module_adam():
    p, g, m = (RNG.standard_normal(64).astype(np.float32) for _ in range(3))
    v = np.abs(RNG.standard_normal(64)).astype(np.float32)
    step = np.float32(3)
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g * g
    p2 = p - 1e-3 * (m2 / (1 - 0.9**3)) / (np.sqrt(v2 / (1 - 0.999**3)) + 1e-8)
    for module in both("adam"):
        out = evaluate(module, p, g, m, v, step)
        assert len(out) == 3
        close(out[0], p2, rtol=1e-5)
        close(out[1], m2, rtol=1e-5)
        close(out[2], v2, rtol=1e-5)


def test_module_rms_norm_bf16():
    x = RNG.standard_normal((4, 64)).astype(BF16)
    w = RNG.standard_normal(64).astype(BF16)
    xf = x.astype(np.float32)
    r = 1 / np.sqrt((xf * xf).mean(axis=1, keepdims=True) + 1e-6)
    expected = ((xf * r).astype(BF16).astype(np.float32) *
                w.astype(np.float32)).astype(BF16)
    for module in both("rms_norm_bf16"):
        (out,) = evaluate(module, x, w)
        assert out.dtype == BF16
        close(out, expected, rtol=2**-7, atol=1e-2)


def test_module_argmax():
    x = RNG.standard_normal((5, 7)).astype(np.float32)
    x[2, 3] = np.nan
    x[4] = 1.0
    for module in both("argmax"):
        (out,) = evaluate(module, x)
        same(out, np.array([*np.argmax(x[:2], axis=1), 3,
                            np.argmax(x[3]), 0], np.int32))


def test_module_scatter_add():
    x = RNG.standard_normal((10, 4)).astype(np.float32)
    idx = np.array([1, 3, 1, -1, 12, -20], np.int32)  # jax wraps negatives
    upd = RNG.standard_normal((6, 4)).astype(np.float32)
    expected = x.copy()
    for i, u in zip(idx, upd):
        j = i + 10 if i < 0 else i
        if 0 <= j < 10:
            expected[j] += u
    for module in both("scatter_add"):
        (out,) = evaluate(module, x, idx, upd)
        close(out, expected)


def test_module_concatenate():
    a, b, c = (RNG.standard_normal((3, n)).astype(np.float32) for n in (2, 5, 1))
    expected = np.concatenate([np.sin(a.astype(np.float64)), b * 2, c], axis=1)
    for module in both("concatenate"):
        (out,) = evaluate(module, a, b, c)
        close(out, expected)


def test_module_dynamic_update_slice():
    x = RNG.standard_normal((8, 8)).astype(np.float32)
    u = RNG.standard_normal((3, 2)).astype(np.float32)
    for i, j in [(2, 3), (7, -1), (-2, 100)]:
        ci = min(max(i + 8 if i < 0 else i, 0), 5)
        cj = min(max(j + 8 if j < 0 else j, 0), 6)
        expected = x.copy()
        expected[ci:ci + 3, cj:cj + 2] = np.exp(u.astype(np.float64))
        for module in both("dynamic_update_slice"):
            (out,) = evaluate(module, x, u, np.int32(i), np.int32(j))
            close(out, expected)


def test_module_gather():
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([0, 5, -1, 9], np.int32)
    for module in both("gather"):
        (out,) = evaluate(module, x, idx)
        close(out, x[np.clip(idx, 0, 5)] + 1)


def test_module_misc_int():
    a = RNG.integers(-50, 50, (4, 6)).astype(np.int32)
    b = RNG.integers(-5, 5, (4, 6)).astype(np.int32)
    a[0, 0], b[0, 0] = I32_MIN, -1
    b[1, :3] = 0
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    safe = np.where(b64 == 0, 1, b64)
    q = np.where(b64 == 0, -1, np.trunc(a64 / safe).astype(np.int64))
    r = np.where(b64 == 0, a64, a64 - np.trunc(a64 / safe).astype(np.int64) * safe)
    q[0, 0], r[0, 0] = I32_MIN, 0
    w = np.where(a > b, q, r)
    p = np.full((8, 8), 7, np.int64)
    p[1::2, 0:6] = w
    p = p[0:7]
    p = p + np.arange(8)
    first = p[::-1, 1:5:2]
    s = ((a.view(np.uint32) >> 3).view(np.int32) ^ (b << 2)).astype(np.int64)
    second = s + np.clip(a, -5, 5)
    for module in both("misc_int"):
        out1, out2 = evaluate(module, a, b)
        same(out1, first.astype(np.int32))
        same(out2, second.astype(np.int32))


# ------------------------------------------------ sort, top-k, convolution

LESS_F32 = """
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}
"""


def test_sort_is_stable_with_equal_keys_and_carries_payload():
    keys = np.array([[3, 1, 2, 1, 3, 0, 1, 2, 3, 0, 1, 2, 2],
                     [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]], np.float32)
    payload = np.broadcast_to(np.arange(13, dtype=np.int32), keys.shape).copy()
    text = """
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}

ENTRY e {
  k = f32[2,13] parameter(0)
  p = s32[2,13] parameter(1)
  ROOT s = (f32[2,13], s32[2,13]) sort(k, p), dimensions={1}, is_stable=true, to_apply=cmp
}
"""
    sorted_keys, order = run(text, keys, payload)
    expected = np.argsort(keys, axis=1, kind="stable").astype(np.int32)
    same(order, expected)
    same(sorted_keys, np.take_along_axis(keys, expected, axis=1))
    # Along dimension 0 of the transpose: the same permutation.
    text0 = text.replace("f32[2,13]", "f32[13,2]").replace(
        "s32[2,13]", "s32[13,2]").replace("dimensions={1}", "dimensions={0}")
    _, order0 = run(text0, keys.T.copy(), payload.T.copy())
    same(order0, expected.T)


def test_sort_sizes_and_a_lexicographic_comparator():
    """Comparator: by the first operand, ties by the second, descending."""
    text = """
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = f32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  gt2 = pred[] compare(c, d), direction=GT
  tie = pred[] and(eq, gt2)
  ROOT r = pred[] or(gt, tie)
}

ENTRY e {
  k = s32[@N] parameter(0)
  v = f32[@N] parameter(1)
  ROOT s = (s32[@N], f32[@N]) sort(k, v), dimensions={0}, to_apply=cmp
}
"""
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 3, 5, 8, 17, 100):
        k = rng.integers(0, 4, n).astype(np.int32)
        v = rng.permutation(n).astype(np.float32)
        sk, sv = run(text.replace("@N", str(n)), k, v)
        order = np.lexsort((-v, -k))
        same(sk, k[order])
        same(sv, v[order])


def test_sort_total_order_with_nans_and_signed_zeros():
    text = """
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT gt = pred[] compare(a, b), direction=GT, type=TOTALORDER
}

ENTRY e {
  x = f32[8] parameter(0)
  ROOT s = f32[8] sort(x), dimensions={0}, is_stable=true, to_apply=cmp
}
"""
    nan, neg_nan = np.float32(np.nan), -np.float32(np.nan)
    x = np.array([0.0, -0.0, nan, 1.0, -np.inf, neg_nan, np.inf, -2.0],
                 np.float32)
    (out,) = run(text, x)
    expected = np.array([nan, np.inf, 1.0, 0.0, -0.0, -2.0, -np.inf, neg_nan],
                        np.float32)
    same(out, expected)


def test_sort_large():
    n = 1 << 15
    x = np.random.default_rng(3).standard_normal((2, n)).astype(np.float32)
    text = LESS_F32 + f"""
ENTRY e {{
  x = f32[2,{n}] parameter(0)
  ROOT s = f32[2,{n}] sort(x), dimensions={{1}}, to_apply=less
}}
"""
    (out,) = run(text, x)
    same(out, np.sort(x, axis=1))


_SORT_WITH_INDEX = """
cmp {
  a = @T[] parameter(0)
  b = @T[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}

ENTRY e {
  k = @T[@SHAPE] parameter(0)
  i = s32[@SHAPE] iota(), iota_dimension=@D
  ROOT s = (@T[@SHAPE], s32[@SHAPE]) sort(k, i), dimensions={@D}, is_stable=@STABLE, to_apply=cmp
}
"""


def _keys_with_nans(n: int, dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-3, 4, n).astype(dtype)       # many equal keys
    x = rng.choice(np.array([0.0, -0.0, 1.0, -1.5, 2.0, np.inf, -np.inf], dtype), n)
    x[rng.random(n) < 0.25] = np.nan
    x[rng.random(n) < 0.1] = -np.asarray(np.nan, dtype)
    return x


@pytest.mark.parametrize("stable", ["true", "false"])
@pytest.mark.parametrize("n,dtype", [
    (n, t) for n in (1, 2, 7, 1000) for t in (np.float32, np.int32, np.float16)] +
    [(5000, np.float32)])   # several kernels: the stable tie-break is an operand
def test_sort_with_nan_keys_and_an_lt_comparator_matches_the_compiled_sort(n, dtype, stable):
    """compare(LT) is no strict weak order once keys hold NaNs (a NaN is
    'equal' to everything): the interpreter's sort used to return indices
    twice and lose others (at n=1000 one from uninitialized memory). It
    now runs the compiled sort's network: always a permutation, the same
    one the cpu target gives; and with integer keys (a strict weak order)
    the sorted order, stable when asked (jax's argsort: key + iota)."""
    import xla_gpu
    etype = {np.float32: "f32", np.int32: "s32", np.float16: "f16"}[dtype]
    keys = _keys_with_nans(n, dtype, seed=n)
    text = (_SORT_WITH_INDEX.replace("@T", etype).replace("@SHAPE", str(n))
            .replace("@D", "0").replace("@STABLE", stable))
    out_keys, index = run(text, keys)
    assert sorted(index.tolist()) == list(range(n))
    same(out_keys, keys[index])
    exe = xla_gpu.compile(text, target="cpu")
    got_keys, got_index = exe.run(keys)
    same(index, got_index)
    same(out_keys, got_keys)
    # Without NaNs (-0.0 and 0.0 equal, integers with many ties) LT is a
    # strict weak order: sorted, in the stable order when asked.
    ordered = np.where(np.isnan(keys), 0, keys).astype(dtype) if etype != "s32" else keys
    out_keys, index = run(text, ordered)
    expected = np.argsort(ordered, kind="stable").astype(np.int32)
    assert np.array_equal(out_keys, ordered[expected])       # -0.0 == 0.0 here
    if stable == "true":
        same(index, expected)
        same(out_keys, ordered[expected])
    got_keys, got_index = exe.run(ordered)
    same(index, got_index)
    same(out_keys, got_keys)


def test_sort_rows_with_nans_along_either_dimension_match_the_compiled_sort():
    import xla_gpu
    keys = _keys_with_nans(6 * 37, np.float32, seed=5).reshape(6, 37)
    for dim, data in ((1, keys), (0, keys.T.copy())):
        shape = ",".join(map(str, data.shape))
        for stable in ("true", "false"):
            text = (_SORT_WITH_INDEX.replace("@T", "f32").replace("@SHAPE", shape)
                    .replace("@D", str(dim)).replace("@STABLE", stable))
            out_keys, index = run(text, data)
            assert np.all(np.sort(index, axis=dim) ==
                          np.arange(37).reshape((1, 37) if dim == 1 else (37, 1)))
            got_keys, got_index = xla_gpu.compile(text, target="cpu").run(data)
            same(index, got_index)
            same(out_keys, got_keys)


def test_sort_errors_name_the_instruction():
    text = LESS_F32 + """
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  ROOT s = (f32[4], f32[4]) sort(x, y), dimensions={0}, to_apply=less
}
"""
    with pytest.raises(HloError, match="instruction 's'.*2 parameters"):
        run(text, np.zeros(4, np.float32), np.zeros(4, np.float32))


def test_topk_op_largest_and_smallest_with_ties():
    x = np.array([[1, 5, 3, 5, -1, 3], [0, 0, 0, 0, 0, 0]], np.float32)
    for largest in ("true", "false"):
        text = f"""
ENTRY e {{
  x = f32[2,6] parameter(0)
  ROOT t = (f32[2,3], s32[2,3]) topk(x), k=3, largest={largest}
}}
"""
        values, idx = run(text, x)
        if largest == "true":
            expected = np.array([[1, 3, 2], [0, 1, 2]], np.int32)
        else:
            expected = np.array([[4, 0, 2], [0, 1, 2]], np.int32)
        same(idx, expected)
        same(values, np.take_along_axis(x, expected, axis=1))


def test_topk_custom_call_of_xla_cpu_uses_its_comparator():
    text = """
gt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=GT
}

ENTRY e {
  x = f32[3,7] parameter(0)
  ROOT t = (f32[3,2], s32[3,2]) custom-call(x), custom_call_target="TopK", called_computations={gt}
}
"""
    x = np.random.default_rng(5).permutation(21).reshape(3, 7).astype(
        np.float32)
    values, idx = run(text, x)
    expected = np.argsort(-x, axis=1, kind="stable")[:, :2].astype(np.int32)
    same(idx, expected)
    same(values, np.take_along_axis(x, expected, axis=1))


def conv_reference(lhs, rhs, stride, pad, lhs_dil, rhs_dil, groups=1,
                   batch_groups=1):
    """A direct convolution, one output element at a time: lhs [N, C, *S],
    rhs [O, C/groups, *K] -> [N/batch_groups, O, *Out], in float64."""
    lhs = lhs.astype(np.float64)
    rhs = rhs.astype(np.float64)
    n, c = lhs.shape[:2]
    o, cg = rhs.shape[:2]
    sp = lhs.shape[2:]
    ks = rhs.shape[2:]
    dil = [(s - 1) * d + 1 for s, d in zip(sp, lhs_dil)]
    padded_size = [lo + s + hi for (lo, hi), s in zip(pad, dil)]
    outs = [(p - ((k - 1) * d + 1)) // st + 1
            for p, k, d, st in zip(padded_size, ks, rhs_dil, stride)]
    nb, og, obg = n // batch_groups, o // groups, o // batch_groups
    out = np.zeros([nb, o] + outs)
    for b in range(nb):
        for f in range(o):
            g = f // og
            bg = f // obg
            for pos in np.ndindex(*outs):
                total = 0.0
                for ch in range(cg):
                    for k in np.ndindex(*ks):
                        coords = []
                        for d in range(len(sp)):
                            at = pos[d] * stride[d] + k[d] * rhs_dil[d] - \
                                pad[d][0]
                            if at % lhs_dil[d] or not 0 <= at < dil[d]:
                                break
                            coords.append(at // lhs_dil[d])
                        else:
                            total += lhs[(bg * nb + b, g * cg + ch) +
                                         tuple(coords)] * rhs[(f, ch) + k]
                out[(b, f) + pos] = total
    return out


def conv_text(lhs_shape, rhs_shape, out_shape, window, labels, extra=""):
    def s(shape):
        return f"f32[{','.join(map(str, shape))}]"
    return f"""
ENTRY e {{
  x = {s(lhs_shape)} parameter(0)
  w = {s(rhs_shape)} parameter(1)
  ROOT c = {s(out_shape)} convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
}}
"""


def test_convolution_hand_computed_1d():
    text = conv_text((1, 4, 1), (2, 1, 1), (1, 3, 1),
                     "size=2 stride=2 pad=1_1", "b0f_0io->b0f")
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 4, 1)
    w = np.ones((2, 1, 1), np.float32)
    (out,) = run(text, x, w)
    same(out, np.array([1, 5, 4], np.float32).reshape(1, 3, 1))


@pytest.mark.parametrize("case", [
    # stride, pad, lhs_dilate, rhs_dilate, groups, batch_groups
    ((1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 1),
    ((2, 1), ((1, 1), (2, 0)), (1, 1), (1, 2), 2, 1),
    ((1, 2), ((0, 1), (1, -1)), (2, 1), (1, 1), 1, 1),
    ((1, 1), ((1, 1), (0, 2)), (2, 1), (1, 2), 2, 1),
    ((1, 2), ((1, 1), (2, 0)), (1, 1), (2, 1), 1, 2),
    ((3, 1), ((2, 2), (1, 1)), (1, 1), (1, 1), 4, 1),  # depthwise
])
def test_convolution_against_a_direct_reference(case):
    stride, pad, lhs_dil, rhs_dil, groups, batch_groups = case
    rng = np.random.default_rng(11)
    n, c, o = 4, 4, 6 if batch_groups == 1 else 4
    if groups == 4:
        o = 8
    x = rng.standard_normal((n, c, 7, 6)).astype(np.float32)
    w = rng.standard_normal((o, c // groups, 3, 2)).astype(np.float32)
    expected = conv_reference(x, w, stride, pad, lhs_dil, rhs_dil, groups,
                              batch_groups).astype(np.float32)
    window = (f"size=3x2 stride={stride[0]}x{stride[1]} "
              f"pad={pad[0][0]}_{pad[0][1]}x{pad[1][0]}_{pad[1][1]} "
              f"lhs_dilate={lhs_dil[0]}x{lhs_dil[1]} "
              f"rhs_dilate={rhs_dil[0]}x{rhs_dil[1]}")
    extra = (f", feature_group_count={groups}" if groups > 1 else "") + \
        (f", batch_group_count={batch_groups}" if batch_groups > 1 else "")
    # Operands as NHWC / HWIO, output as NHWC: the labels do the transposes.
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    w_hwio = np.ascontiguousarray(w.transpose(2, 3, 1, 0))
    out_shape = (expected.shape[0],) + expected.shape[2:] + \
        (expected.shape[1],)
    text = conv_text(x_nhwc.shape, w_hwio.shape, out_shape, window,
                     "b01f_01io->b01f", extra)
    (out,) = run(text, x_nhwc, w_hwio)
    close(out, expected.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)
    # The same convolution with NCHW / OIHW labels.
    text = conv_text(x.shape, w.shape, expected.shape, window,
                     "bf01_oi01->bf01", extra)
    (out,) = run(text, x, w)
    close(out, expected, rtol=1e-5, atol=1e-5)


def test_convolution_window_reversal_and_bad_labels():
    x = np.arange(5, dtype=np.float32).reshape(1, 5, 1)
    w = np.array([1, 10], np.float32).reshape(2, 1, 1)
    text = conv_text((1, 5, 1), (2, 1, 1), (1, 4, 1),
                     "size=2 rhs_reversal=1", "b0f_0io->b0f")
    (out,) = run(text, x, w)
    # The kernel applied reversed: out[i] = 10 * x[i] + 1 * x[i + 1].
    same(out, np.array([1, 12, 23, 34], np.float32).reshape(1, 4, 1))
    bad = conv_text((1, 5, 1), (2, 1, 1), (1, 4, 1), "size=2", "b0f_0ix->b0f")
    with pytest.raises(HloError, match="instruction 'c'.*labels"):
        run(bad, x, w)
    wrong = conv_text((1, 5, 1), (2, 1, 1), (1, 3, 1), "size=2",
                      "b0f_0io->b0f")
    with pytest.raises(HloError, match="gives 4 outputs"):
        run(wrong, x, w)


def test_convolution_bf16_operands_accumulate_into_f32():
    text = """
ENTRY e {
  x = bf16[1,3,1] parameter(0)
  w = bf16[3,1,1] parameter(1)
  ROOT c = f32[1,1,1] convolution(x, w), window={size=3}, dim_labels=b0f_0io->b0f
}
"""
    x = np.array([1, 2**-8, 2**-8], BF16).reshape(1, 3, 1)
    w = np.ones((3, 1, 1), BF16)
    (out,) = run(text, x, w)
    same(out, np.array([1 + 2**-7], np.float32).reshape(1, 1, 1))


# ------------------------------------------------------------ custom calls


def test_custom_call_through_a_registered_python_handler():
    from xla_gpu.hlo.interpreter import (register_custom_call,
                                         unregister_custom_call)
    seen = {}

    def handler(x, pair, **attrs):
        seen.update(attrs)
        a, b = pair
        return x * attrs["scale"], (a + b).astype(np.int32)

    text = """
ENTRY e {
  x = f32[3] parameter(0)
  a = s32[2] parameter(1)
  b = s32[2] parameter(2)
  t = (s32[2], s32[2]) tuple(a, b)
  ROOT c = (f32[3], s32[2]) custom-call(x, t), custom_call_target="my_target", api_version=API_VERSION_TYPED_FFI, backend_config={scale = 2.500000e+00 : f32, mode = 3 : i32, name = "hi \\22q\\22", dims = array<i64: 4, 5>, opts = {on = true, n = -7 : i64}, list = [1 : i8, 0x7FC00000 : f32], flag, d = dense<[1, 2]> : tensor<2xi32>, h = 1.5 : bf16, u = 255 : ui8}
}
"""
    register_custom_call("my_target", handler)
    try:
        x = np.array([1, 2, 3], np.float32)
        out, total = run(text, x, np.array([1, 2], np.int32),
                         np.array([10, 20], np.int32))
    finally:
        unregister_custom_call("my_target")
    same(out, x * np.float32(2.5))
    same(total, np.array([11, 22], np.int32))
    assert seen["scale"] == np.float32(2.5) and \
        isinstance(seen["scale"], np.float32)
    assert seen["mode"] == 3 and isinstance(seen["mode"], np.int32)
    assert seen["name"] == 'hi "q"'
    same(seen["dims"], np.array([4, 5], np.int64))
    assert seen["opts"] == {"on": True, "n": -7}
    assert seen["list"][0] == 1 and np.isnan(seen["list"][1])
    assert seen["flag"] is True
    same(seen["d"], np.array([1, 2], np.int32))
    assert seen["h"].dtype == BF16 and float(seen["h"]) == 1.5
    assert seen["u"] == 255 and seen["u"].dtype == np.uint8


def test_custom_call_errors():
    from xla_gpu.hlo.interpreter import (register_custom_call,
                                         unregister_custom_call)
    text = """
ENTRY e {
  x = f32[3] parameter(0)
  ROOT c = f32[3] custom-call(x), custom_call_target="t", api_version=API_VERSION_TYPED_FFI, backend_config={k = 1 : i32}
}
"""
    x = np.zeros(3, np.float32)
    with pytest.raises(HloError, match="instruction 'c'.*no handler.*'t'"):
        run(text, x)

    def failing(x, k):
        raise RuntimeError("bad k")
    register_custom_call("t", failing)
    try:
        with pytest.raises(HloError, match="'t' failed: RuntimeError: bad k"):
            run(text, x)
        register_custom_call("t", lambda x, k: np.zeros(4, np.float32))
        with pytest.raises(HloError, match="returned shape \\[4\\]"):
            run(text, x)
        register_custom_call("t", lambda x, k: np.zeros(3, np.complex64))
        with pytest.raises(HloError, match="returned complex64"):
            run(text, x)
        broken = text.replace("{k = 1 : i32}", "{k = 1 : i99}")
        register_custom_call("t", lambda x, k: x)
        with pytest.raises(HloError, match="backend_config.*'i99'"):
            run(broken, x)
    finally:
        unregister_custom_call("t")
    with pytest.raises(ValueError):
        register_custom_call("", lambda: None)


# ------------------------------------------- select-and-scatter, rng


def test_select_and_scatter_overlapping_windows_with_padding():
    text = """
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GE
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}

ENTRY e {
  x = f32[6] parameter(0)
  s = f32[3] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[6] select-and-scatter(x, s, z), window={size=3 stride=2 pad=0_1}, select=ge, scatter=add
}
"""
    x = np.array([1, 9, 2, 2, 7, 3], np.float32)
    s = np.array([10, 20, 30], np.float32)
    # windows [1 9 2] -> 9 (idx 1); [2 2 7] -> 7 (idx 4); [7 3 pad] -> 7.
    (out,) = run(text, x, s)
    same(out, np.array([0, 10, 0, 0, 50, 0], np.float32))
    # Ties: GE keeps the first of equal maxima.
    x2 = np.array([5, 5, 5, 1, 1, 1], np.float32)
    (out2,) = run(text, x2, s)
    same(out2, np.array([10, 0, 20, 0, 30, 0], np.float32))


def test_rng_bit_generator_algorithms_known_answers():
    from xla_gpu.hlo.interpreter import philox4x32, threefry2x32
    # Random123's known-answer vectors (threefry2x32_20, philox4x32_10).
    a, b = threefry2x32(np.array([0x243f6a88], np.uint32),
                        np.array([0x85a308d3], np.uint32),
                        (0x13198a2e, 0x03707344))
    assert (int(a[0]), int(b[0])) == (0xc4923a9c, 0x483df7a0)
    words = philox4x32([np.array([v], np.uint64) for v in
                        (0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344)],
                       (0xa4093822, 0x299f31d0))
    assert [int(w[0]) for w in words] == [0xd16cfe09, 0x94fdcceb, 0x5001e420,
                                          0x24126ea1]


def test_rng_bit_generator_states_and_types():
    def gen(algorithm, out, state):
        text = f"""
ENTRY e {{
  s = u64[{state.size}] parameter(0)
  ROOT r = (u64[{state.size}], {out}) rng-bit-generator(s), algorithm={algorithm}
}}
"""
        return run(text, state)
    state = np.array([7, 2**64 - 1], np.uint64)
    new, bits = gen("rng_philox", "u32[5]", state)
    # 5 words take 2 Philox blocks; the 64-bit counter wraps.
    same(new, np.array([7, 1], np.uint64))
    new3, bits3 = gen("rng_philox", "u32[5]",
                      np.array([7, 2**64 - 1, 4], np.uint64))
    same(new3, np.array([7, 1, 5], np.uint64))
    new_t, _ = gen("rng_three_fry", "s32[3,3]", state)
    same(new_t, np.array([7, 5], np.uint64))  # wraps: 2^64 - 1 + 6 (3x2 half)
    _, default_bits = gen("rng_default", "u32[5]", state)
    same(default_bits, bits)
    _, narrow = gen("rng_philox", "u8[5]", state)
    same(narrow, (bits & 0xFF).astype(np.uint8))
    with pytest.raises(HloError, match="rng algorithm"):
        gen("rng_nope", "u32[2]", state)
    with pytest.raises(HloError, match="cannot be reproduced"):
        run("ENTRY e {\n  a = f32[] constant(0)\n  b = f32[] constant(1)\n"
            "  ROOT r = f32[3] rng(a, b), distribution=rng_uniform\n}\n")


def test_fft_kinds_match_numpy():
    rng = np.random.default_rng(2)
    z = (rng.standard_normal((3, 4, 6)) +
         1j * rng.standard_normal((3, 4, 6))).astype(np.complex64)
    x = rng.standard_normal((3, 4, 6)).astype(np.float32)
    text = """
ENTRY e {
  z = c64[3,4,6] parameter(0)
  x = f32[3,4,6] parameter(1)
  f = c64[3,4,6] fft(z), fft_type=FFT, fft_length={4,6}
  i = c64[3,4,6] fft(z), fft_type=IFFT, fft_length={6}
  r = c64[3,4,4] fft(x), fft_type=RFFT, fft_length={4,6}
  b = f32[3,4,6] fft(r), fft_type=IRFFT, fft_length={4,6}
  ROOT t = (c64[3,4,6], c64[3,4,6], c64[3,4,4], f32[3,4,6]) tuple(f, i, r, b)
}
"""
    f, i, r, b = run(text, z, x)
    close(f.real, np.fft.fft2(z).real, 1e-5, 1e-5)
    close(f.imag, np.fft.fft2(z).imag, 1e-5, 1e-5)
    close(i.imag, np.fft.ifft(z, axis=-1).imag, 1e-5, 1e-6)
    close(r.real, np.fft.rfft2(x).real, 1e-5, 1e-5)
    close(b, x, 1e-5, 1e-5)
    bad = text.replace("fft_length={4,6}\n  i", "fft_length={5,6}\n  i")
    with pytest.raises(HloError, match="instruction 'f'.*FFT needs"):
        run(bad, z, x)


def test_opt_barrier_passes_its_tuple_through():
    text = """
ENTRY e {
  x = f32[2] parameter(0)
  y = s32[] parameter(1)
  t = (f32[2], s32[]) tuple(x, y)
  b = (f32[2], s32[]) opt-barrier(t)
  ROOT g = f32[2] get-tuple-element(b), index=0
}
"""
    (out,) = run(text, np.array([1, 2], np.float32), np.int32(3))
    same(out, np.array([1, 2], np.float32))


def test_oversized_values_are_refused_before_allocating():
    huge = """
ENTRY e {
  x = f32[] parameter(0)
  ROOT b = f32[100000,100000] broadcast(x), dimensions={}
}
"""
    with pytest.raises(HloError, match="instruction 'b'.*limit"):
        run(huge, np.float32(1))
    dilated = conv_text((1, 4, 1), (2, 1, 1), (1, 3, 1),
                        "size=2 stride=1000000000 lhs_dilate=1000000000",
                        "b0f_0io->b0f")
    with pytest.raises(HloError, match="instruction 'c'.*padded input"):
        run(dilated, np.zeros((1, 4, 1), np.float32),
            np.zeros((2, 1, 1), np.float32))


def gemm_text(a, b, out, config, extra_operands="", extra_params=""):
    return f"""
ENTRY e {{
  a = {a} parameter(0)
  b = {b} parameter(1){extra_params}
  g = ({out}, s8[1024]) custom-call(a, b{extra_operands}), custom_call_target="__cublas$lt$matmul", backend_config={config}
  ROOT d = {out} get-tuple-element(g), index=0
}}
"""


def gemm_config(epilogue="DEFAULT", alpha=1, beta=0, lc="1", rc="0",
                batch=""):
    b = f'"{batch}"' if batch else ""
    return ('{"operation_queue_id":"0","gemm_backend_config":{"alpha_real":'
            f'{alpha},"alpha_imag":0,"beta":{beta},"dot_dimension_numbers":'
            f'{{"lhs_contracting_dimensions":["{lc}"],'
            f'"rhs_contracting_dimensions":["{rc}"],"lhs_batch_dimensions":'
            f'[{b}],"rhs_batch_dimensions":[{b}]}},"precision_config":'
            '{"operand_precision":["DEFAULT","DEFAULT"]},"epilogue":'
            f'"{epilogue}","grad_x":false,"grad_y":false}}}}')


def test_cublas_gemm_custom_calls_of_xla_gpu_dumps():
    rng = np.random.default_rng(9)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    c = rng.standard_normal((4, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    ref = a.astype(np.float64) @ b
    (d,) = run(gemm_text("f32[4,6]", "f32[6,5]", "f32[4,5]",
                         gemm_config(alpha=2)), a, b)
    close(d, 2 * ref, 1e-6, 1e-6)
    (d,) = run(gemm_text("f32[4,6]", "f32[6,5]", "f32[4,5]",
                         gemm_config(beta=0.5), ", c",
                         "\n  c = f32[4,5] parameter(2)"), a, b, c)
    close(d, ref + 0.5 * c, 1e-6, 1e-6)
    (d,) = run(gemm_text("f32[4,6]", "f32[6,5]", "f32[4,5]",
                         gemm_config("BIAS_RELU"), ", v",
                         "\n  v = f32[5] parameter(2)"), a, b, bias)
    close(d, np.maximum(ref + bias, 0), 1e-6, 1e-6)
    # Transposed rhs (contracting dimension 1), bf16 in, f32 out, GELU.
    bt = np.ascontiguousarray(b.T).astype(BF16)
    a16 = a.astype(BF16)
    (d,) = run(gemm_text("bf16[4,6]", "bf16[5,6]", "f32[4,5]",
                         gemm_config("GELU", rc="1")), a16, bt)
    x = a16.astype(np.float64) @ bt.astype(np.float64).T
    gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    close(d, gelu, 1e-5, 1e-6)
    # Batched, with the legacy target and a plain (non-tuple) result.
    a3 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b3 = rng.standard_normal((2, 4, 5)).astype(np.float32)
    text = f"""
ENTRY e {{
  a = f32[2,3,4] parameter(0)
  b = f32[2,4,5] parameter(1)
  ROOT g = f32[2,3,5] custom-call(a, b), custom_call_target="__cublas$gemm", backend_config={gemm_config(lc="2", rc="1", batch="0")}
}}
"""
    (d,) = run(text, a3, b3)
    close(d, np.matmul(a3.astype(np.float64), b3), 1e-6, 1e-6)
    with pytest.raises(HloError, match="instruction 'g'.*2 operands.*take 3"):
        run(gemm_text("f32[4,6]", "f32[6,5]", "f32[4,5]", gemm_config("BIAS")),
            a, b)
    with pytest.raises(HloError, match="unsupported epilogue 'NOPE'"):
        run(gemm_text("f32[4,6]", "f32[6,5]", "f32[4,5]", gemm_config("NOPE")),
            a, b)


def test_copy_between_layouts_is_a_physical_transpose_for_bitcasts():
    """A layout-changing copy keeps the logical value; a bitcast after it
    reads the new physical order (XLA:CPU's transpose = copy + bitcast)."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (c, flat, t) = run("""
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  c = f32[2,3]{0,1} copy(x)
  flat = f32[6]{0} bitcast(c)
  t = f32[3,2]{1,0} bitcast(c)
  ROOT r = (f32[2,3]{0,1}, f32[6]{0}, f32[3,2]{1,0}) tuple(c, flat, t)
}
""", x)
    same(c, x)
    same(flat, x.T.reshape(6))
    same(t, x.T.copy())


def cudnn_text(target, shapes, result, window, labels, extra="",
               config='{"cudnn_conv_backend_config":{"conv_result_scale":1,'
                      '"activation_mode":"kNone","side_input_scale":0,'
                      '"leakyrelu_alpha":0}}'):
    params = "\n".join(f"  p{i} = f32[{','.join(map(str, s))}] parameter({i})"
                       for i, s in enumerate(shapes))
    operands = ", ".join(f"p{i}" for i in range(len(shapes)))
    out = f"f32[{','.join(map(str, result))}]"
    return f"""
ENTRY e {{
{params}
  c = ({out}, u8[0]) custom-call({operands}), window={{{window}}}, dim_labels={labels}{extra}, custom_call_target="{target}", backend_config={config}
  ROOT r = {out} get-tuple-element(c), index=0
}}
"""


def test_cudnn_convolutions_match_jax_gradients():
    """conv_grouped_grad's forward convolution and its gradients, as
    XLA:GPU's cuDNN custom calls, against jax's stored results."""
    from program_data import load_program
    prog = load_program("conv_grouped_grad")
    x, kernel = prog.inputs
    y, dx, dk = prog.outputs
    dy = np.cos(y)  # d sum(sin(y)) / dy
    window = "size=3x2 stride=2x1 pad=1_1x2_0 rhs_dilate=1x2"
    labels = "bf01_oi01->bf01"
    extra = ", feature_group_count=2"
    (fwd,) = run(cudnn_text("__cudnn$convForward", [x.shape, kernel.shape],
                            y.shape, window, labels, extra), x, kernel)
    close(fwd, y, 1e-5, 1e-5)
    (grad_x,) = run(cudnn_text("__cudnn$convBackwardInput",
                               [dy.shape, kernel.shape], x.shape, window,
                               labels, extra), dy, kernel)
    close(grad_x, dx, 1e-5, 1e-5)
    (grad_k,) = run(cudnn_text("__cudnn$convBackwardFilter",
                               [x.shape, dy.shape], kernel.shape, window,
                               labels, extra), x, dy)
    close(grad_k, dk, 1e-5, 1e-5)


@pytest.mark.parametrize("geometry", [
    # spatial sizes, window, stride, padding, lhs / rhs dilation, reversal,
    # feature groups, batch groups
    dict(size=(3, 2), stride=(2, 1), pad=((1, 2), (0, 1)), lhs=(1, 2),
         rhs=(1, 1), rev=(0, 0), groups=1, batch_groups=1),
    dict(size=(2, 2), stride=(1, 1), pad=((-1, 1), (1, 0)), lhs=(1, 1),
         rhs=(2, 1), rev=(1, 0), groups=3, batch_groups=1),
    dict(size=(2, 3), stride=(1, 2), pad=((0, 0), (0, 0)), lhs=(1, 1),
         rhs=(1, 1), rev=(0, 0), groups=1, batch_groups=2),
])
def test_cudnn_backward_convolutions_are_adjoints(geometry):
    """<conv(x, w), dy> = <x, backward_input(dy, w)> = <w,
    backward_filter(x, dy)> for strided, padded, dilated, reversed and
    grouped convolutions (NHWC input, HWIO kernel)."""
    g = geometry
    rng = np.random.default_rng(4)
    n, c, o = 4, 6, 6
    spatial = (5, 7)
    x_shape = (n,) + spatial + (c,)
    w_shape = g["size"] + (c // g["groups"], o)
    out_spatial = []
    for d in range(2):
        extent = (spatial[d] - 1) * g["lhs"][d] + 1 + sum(g["pad"][d])
        span = (g["size"][d] - 1) * g["rhs"][d] + 1
        out_spatial.append((extent - span) // g["stride"][d] + 1)
    out_shape = (n // g["batch_groups"],) + tuple(out_spatial) + (o,)
    window = "size={}x{} stride={}x{} pad={}_{}x{}_{} lhs_dilate={}x{} " \
        "rhs_dilate={}x{} rhs_reversal={}x{}".format(
            *g["size"], *g["stride"], *g["pad"][0], *g["pad"][1], *g["lhs"],
            *g["rhs"], *g["rev"])
    extra = f", feature_group_count={g['groups']}, " \
        f"batch_group_count={g['batch_groups']}"
    labels = "b01f_01io->b01f"
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    dy = rng.standard_normal(out_shape).astype(np.float32)
    (y,) = run(conv_text(x_shape, w_shape, out_shape, window, labels, extra),
               x, w)
    (gx,) = run(cudnn_text("__cudnn$convBackwardInput", [out_shape, w_shape],
                           x_shape, window, labels, extra), dy, w)
    (gw,) = run(cudnn_text("__cudnn$convBackwardFilter", [x_shape, out_shape],
                           w_shape, window, labels, extra), x, dy)
    total = float(np.sum(y.astype(np.float64) * dy))
    assert abs(total) > 1e-3
    assert math.isclose(float(np.sum(x.astype(np.float64) * gx)), total,
                        rel_tol=1e-4, abs_tol=1e-3)
    assert math.isclose(float(np.sum(w.astype(np.float64) * gw)), total,
                        rel_tol=1e-4, abs_tol=1e-3)


def test_cudnn_bias_activation_forward():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    side = rng.standard_normal((1, 5, 5, 4)).astype(np.float32)
    window, labels = "size=3x3 pad=1_1x1_1", "b01f_01io->b01f"
    (plain,) = run(conv_text(x.shape, w.shape, (1, 5, 5, 4), window, labels),
                   x, w)
    config = ('{"cudnn_conv_backend_config":{"conv_result_scale":0.5,'
              '"activation_mode":"kRelu","side_input_scale":2}}')
    (fused,) = run(cudnn_text("__cudnn$convBiasActivationForward",
                              [x.shape, w.shape, (4,), side.shape],
                              (1, 5, 5, 4), window, labels, config=config),
                   x, w, bias, side)
    close(fused, np.maximum(0.5 * plain + 2 * side + bias, 0), 1e-5, 1e-5)
    bad = config.replace("kRelu", "kBandPass")
    with pytest.raises(HloError, match="instruction 'c'.*kBandPass"):
        run(cudnn_text("__cudnn$convBiasActivationForward",
                       [x.shape, w.shape, (4,)], (1, 5, 5, 4), window, labels,
                       config=bad), x, w, bias)


def test_async_and_copy_start_done_pairs():
    (d, cd) = run("""
comp {
  p = f32[4] parameter(0)
  q = f32[] parameter(1)
  b = f32[4] broadcast(q), dimensions={}
  ROOT n = f32[4] multiply(p, b)
}

ENTRY e {
  x = f32[4] parameter(0)
  k = f32[] parameter(1)
  s = ((f32[4], f32[]), f32[4], s32[]) async-start(x, k), calls=comp
  u = ((f32[4], f32[]), f32[4], s32[]) async-update(s)
  d = f32[4] async-done(u)
  cs = (f32[4], f32[4], u32[]) copy-start(x)
  cd = f32[4] copy-done(cs)
  ROOT t = (f32[4], f32[4]) tuple(d, cd)
}
""", np.array([1, 2, 3, 4], np.float32), np.float32(-2))
    same(d, np.array([-2, -4, -6, -8], np.float32))
    same(cd, np.array([1, 2, 3, 4], np.float32))


def test_dependency_dimension_size_and_device_ids():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    (a, g, r, p) = run("""
ENTRY e {
  x = f32[4,3] parameter(0)
  t = token[] after-all()
  a = f32[4,3] add-dependency(x, t)
  g = s32[] get-dimension-size(a), dimensions={1}
  r = u32[] replica-id()
  p = u32[] partition-id()
  ROOT tup = (f32[4,3], s32[], u32[], u32[]) tuple(a, g, r, p)
}
""", x)
    same(a, x)
    same(g, np.int32(3))
    same(r, np.uint32(0))
    same(p, np.uint32(0))

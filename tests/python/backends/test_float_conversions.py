"""Float conversions between every pair of float types, and reduce-precision
of every float type, on the cpu target (run), the cuda target (PTX) and the
reference interpreter, against references written here from the
definitions: conversions round once to nearest, ties to even (from the
exact values of the destination's codes), reduce-precision is XLA's
(mantissa rounded to nearest even, exponents out of range flushed to
signed inf / zero, NaN kept)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo

WIDE = ("f64", "f32", "f16", "bf16")
MINI = ("f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz", "f8e4m3",
        "f8e3m4", "f4e2m1fn")
FLOATS = WIDE + MINI
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@pytest.fixture(autouse=True)
def _quiet_numpy():
    """The references overflow and cast NaNs on purpose."""
    with np.errstate(all="ignore"):
        yield


def _dtype(t: str) -> np.dtype:
    return np.dtype(hlo.numpy_dtype(t))


def _bits(t: str) -> int:
    return 4 if t == "f4e2m1fn" else 8 * _dtype(t).itemsize


def _all_codes(t: str) -> np.ndarray:
    return np.arange(1 << _bits(t), dtype=_UINT[max(_bits(t) // 8, 1)]).view(_dtype(t))


# -- the rounding reference ------------------------------------------------------------


def _round_nearest_even(x: np.ndarray, t: str) -> np.ndarray:
    """f64 values `x` rounded once to the narrow type `t` (at most 16 bits),
    as f64: the nearest of t's values, a tie going to the even code;
    beyond the largest value (after rounding) inf where t has one, NaN
    where it has NaN but no inf, the largest value where it has neither;
    signed zeros kept where t has -0."""
    codes = _all_codes(t)
    values = codes.astype(np.float64)
    sign_bit = 1 << (_bits(t) - 1)
    positive = values[:sign_bit]
    top = int(np.flatnonzero(np.isfinite(positive))[-1])
    assert np.all(np.diff(positive[:top + 1]) > 0)     # codes ascend in value
    finite = positive[:top + 1]
    # The value one step past the largest: where rounding up overflows.
    beyond = finite[top] + (finite[top] - finite[top - 1])
    table = np.append(finite, beyond)
    mag = np.abs(x)
    lo = np.clip(np.searchsorted(table, mag, side="right") - 1, 0, top)
    hi = lo + 1
    d_lo, d_hi = mag - table[lo], table[hi] - mag     # exact (Sterbenz)
    up = (d_hi < d_lo) | ((d_hi == d_lo) & (lo % 2 == 1))
    code = np.where(up, hi, lo)
    out = table[code]
    has_inf = np.isinf(values).any()
    has_nan = np.isnan(values).any()
    overflow = (code > top) | np.isinf(mag)
    out = np.where(overflow, np.inf if has_inf else np.nan if has_nan else finite[top], out)
    signed = np.where(np.signbit(x), -out, out)
    if not np.any(np.signbit(values) & (values == 0)):     # fnuz: no -0
        signed = np.where(signed == 0, 0.0, signed)
    return np.where(np.isnan(x), np.nan, signed)


def _converted(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """The reference conversion of `x` (of type src), as f64."""
    exact = x.astype(np.float64)          # every float type is exact in f64
    if dst == "f64":
        return exact
    if dst == "f32":
        return exact.astype(np.float32).astype(np.float64)   # IEEE hardware
    return _round_nearest_even(exact, dst)


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Same value and sign (zeros included), or both NaN."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    return ((g == w) & (np.signbit(g) == np.signbit(w))) | (np.isnan(g) & np.isnan(w))


def _inputs(src: str) -> np.ndarray:
    """Every code of a type of at most 16 bits; for f32 / f64: specials,
    random bit patterns, and every midpoint between neighbouring values of
    the narrow types (ties) with the values just beside it (for f64, also
    the values that plain f32 rounding turns into ties)."""
    dt = _dtype(src)
    if _bits(src) <= 16:
        return _all_codes(src)
    rng = np.random.default_rng(7)
    u = _UINT[dt.itemsize]
    parts = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 65504.0, 65520.0,
                       3.4e38, 1e-45, 2.0 ** -149, 2.0 ** -126, 448.0, 464.0, 480.0,
                       57344.0, 61440.0], np.float64).astype(dt),
             rng.integers(0, np.iinfo(u).max, 20000, dtype=u, endpoint=True).view(dt)]
    if src == "f64":
        parts.append(np.array([1e300, -1e300, 1e-300, 2.0 ** -1074, 3.5e38,
                               1 + 2.0 ** -8 + 2.0 ** -30], np.float64))
    for t in ("f16", "bf16") + MINI:
        v = np.unique(np.abs(_all_codes(t).astype(np.float64)))
        v = v[np.isfinite(v)]
        mids = (v[:-1] + v[1:]) / 2
        mids = np.concatenate([mids, mids * -1])
        if src == "f64":
            around = [mids, mids * (1 + 2.0 ** -40), mids * (1 - 2.0 ** -40)]
        else:
            m32 = mids.astype(np.float32)
            around = [m32, np.nextafter(m32, np.float32(np.inf)),
                      np.nextafter(m32, np.float32(-np.inf))]
        parts += [a.astype(dt) for a in around]
    return np.concatenate(parts)


# -- conversions -----------------------------------------------------------------------


def _convert_fusion(src: str, n: int) -> str:
    outs = [d for d in FLOATS if d != src]
    lines = [f" c{k} = {d}[{n}] convert(p)" for k, d in enumerate(outs)]
    shapes = ", ".join(f"{d}[{n}]" for d in outs)
    names = ", ".join(f"c{k}" for k in range(len(outs)))
    return ("HloModule m\nf {\n" + f" p = {src}[{n}] parameter(0)\n" + "\n".join(lines) +
            f"\n ROOT t = ({shapes}) tuple({names})\n}}\n")


@pytest.mark.parametrize("src", FLOATS)
def test_converts_round_once_to_nearest_even(src):
    """src -> every other float type: compiled for the cpu target and run,
    compiled to PTX for cuda, and evaluated by the interpreter, each
    against the exact reference (f64 -> bf16 used to leave a
    `__truncdfbf2` call the JIT could not resolve, and f64 -> f8 rounded
    twice, through f32)."""
    x = _inputs(src)
    text = _convert_fusion(src, x.size)
    outs = [d for d in FLOATS if d != src]
    got = xla_gpu.compile(text, target="cpu", cache=False).run(x)
    interpreted = hlo.evaluate(hlo.parse_module(text).entry, x)
    assert ".entry f(" in xla_gpu.compile(text, target="cuda", cache=False).ptx
    for dst, g, i in zip(outs, got, interpreted):
        want = _converted(x, src, dst)
        assert g.dtype == _dtype(dst) and i.dtype == _dtype(dst)
        for name, result in (("cpu", g), ("interpreter", i)):
            ok = _same(result, want)
            if dst == "f4e2m1fn":   # no NaN: a zero (ml_dtypes: -0 or +0 by the sign)
                ok |= np.isnan(x.astype(np.float64)) & (result.astype(np.float64) == 0)
            assert ok.all(), (name, src, dst, x[~ok][:4], result[~ok][:4], want[~ok][:4])


def test_f64_to_narrow_is_rounded_once():
    """1 + 2^-8 + 2^-30 is above the bf16 midpoint 1 + 2^-8: it rounds up,
    where rounding to f32 first makes it the tie, which goes down to 1."""
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -11 + 2.0 ** -40),
                  1 + 2.0 ** -4 + 2.0 ** -35], np.float64)
    text = ("HloModule m\nf {\n p = f64[3] parameter(0)\n b = bf16[3] convert(p)\n"
            " h = f16[3] convert(p)\n e = f8e4m3fn[3] convert(p)\n"
            " ROOT t = (bf16[3], f16[3], f8e4m3fn[3]) tuple(b, h, e)\n}\n")
    b, h, e = xla_gpu.compile(text, target="cpu", cache=False).run(x)
    assert b[0] == ml_dtypes.bfloat16(1.0078125)
    assert h[1] == np.float16(-(1 + 2.0 ** -10))
    assert e[2] == ml_dtypes.float8_e4m3fn(1.125)


# -- reduce-precision ------------------------------------------------------------------

_OWN = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23), "f64": (11, 52)}
_SHAPES = [(5, 10), (5, 3), (4, 2), (8, 7), (2, 0), (3, 1), (8, 23), (11, 4), (6, 0),
           (1, 5), (10, 40), (1, 0)]


def _reduce_precision_reference(x: np.ndarray, t: str, eb: int, mb: int) -> np.ndarray:
    """XLA's reduce-precision from its definition in values (not bits), as
    f64: x rounded to nearest with mb fraction bits at its binade (the
    smallest normal binade for the type's own denormals), a tie to the
    even code, then
    magnitudes at or past 2^(bias+1) -> inf, below 2^(1-bias) -> zero (the
    sign kept), bias = 2^(eb-1) - 1; NaN stays NaN. f8 / f4 values are
    reduced as f16s (as XLA's float normalization does)."""
    if t not in _OWN:   # back to t: inf becomes NaN or the largest where t lacks it
        wide = x.astype(np.float32).astype(np.float16)
        return _round_nearest_even(_reduce_precision_reference(wide, "f16", eb, mb), t)
    src_eb, src_mb = _OWN[t]
    v = x.astype(np.float64)
    src_bias = (1 << (src_eb - 1)) - 1
    out = v.copy()
    finite = np.isfinite(v) & (v != 0)
    if mb < src_mb:
        e = np.frexp(np.where(finite, v, 1.0))[1] - 1      # the binade, exactly
        e = np.maximum(e, 1 - src_bias)                   # own denormals
        quantum = np.exp2(e - mb)
        scaled = v / quantum
        steps = np.rint(scaled)            # ties to the even multiple of the quantum
        if mb == 0:
            # No fraction bit: 2^e and 2^(e+1) are codes of neighbouring
            # exponents, and a tie goes to the one whose biased exponent
            # is even.
            tie = np.abs(scaled) == 1.5
            up = (e + src_bias) % 2 == 1
            steps = np.where(tie, np.copysign(np.where(up, 2.0, 1.0), v), steps)
        with np.errstate(over="ignore"):   # f64's carry past its largest: inf
            out = np.where(finite, steps * quantum, v)
        # A carry past the type's largest binade is its infinity.
        out = np.where(np.abs(out) >= np.ldexp(1.0, src_bias + 1), np.copysign(np.inf, v),
                       out)
    if eb < src_eb:
        bias = (1 << (eb - 1)) - 1
        mag = np.abs(out)
        out = np.where(mag >= 2.0 ** (bias + 1), np.copysign(np.inf, out), out)
        out = np.where(mag < 2.0 ** (1 - bias), np.copysign(0.0, out), out)
    return np.where(np.isnan(v), np.nan, out)


@pytest.mark.parametrize("t", FLOATS)
def test_reduce_precision_of_every_float_type(t):
    """reduce-precision (refused for every type before) on the cpu target,
    the interpreter and cuda's PTX, for exponent / mantissa widths below,
    at and above the type's own: results against the reference, and NaNs
    kept bit for bit (the input NaN) on the cpu target and the interpreter
    for the types reduced in their own bits."""
    x = _inputs(t)
    n = x.size
    lines = [f" r{k} = {t}[{n}] reduce-precision(p), exponent_bits={eb}, "
             f"mantissa_bits={mb}" for k, (eb, mb) in enumerate(_SHAPES)]
    shapes = ", ".join(f"{t}[{n}]" for _ in _SHAPES)
    names = ", ".join(f"r{k}" for k in range(len(_SHAPES)))
    text = ("HloModule m\nf {\n" + f" p = {t}[{n}] parameter(0)\n" + "\n".join(lines) +
            f"\n ROOT t = ({shapes}) tuple({names})\n}}\n")
    got = xla_gpu.compile(text, target="cpu", cache=False).run(x)
    interpreted = hlo.evaluate(hlo.parse_module(text).entry, x)
    assert ".entry f(" in xla_gpu.compile(text, target="cuda", cache=False).ptx
    nan = np.isnan(x.astype(np.float64))
    u = _UINT[_dtype(t).itemsize]
    for (eb, mb), g, i in zip(_SHAPES, got, interpreted):
        want = _reduce_precision_reference(x, t, eb, mb)
        for name, result in (("cpu", g), ("interpreter", i)):
            ok = _same(result, want)
            assert ok.all(), (name, t, eb, mb, x[~ok][:4], result[~ok][:4], want[~ok][:4])
            if t in _OWN:
                assert np.array_equal(result[nan].view(u), x[nan].view(u)), (name, eb, mb)


def test_reduce_precision_to_bf16_and_f16_of_f32():
    """The common uses: f32 reduced to bf16's (8, 7) and f16's (5, 10)
    widths equals the conversion to that type and back (for f16 within
    its normal range: reduce-precision flushes what would be f16's
    denormals)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4096) * np.exp2(rng.integers(-30, 30, 4096))).astype(np.float32)
    text = ("HloModule m\nf {\n p = f32[4096] parameter(0)\n"
            " b = f32[4096] reduce-precision(p), exponent_bits=8, mantissa_bits=7\n"
            " h = f32[4096] reduce-precision(p), exponent_bits=5, mantissa_bits=10\n"
            " ROOT t = (f32[4096], f32[4096]) tuple(b, h)\n}\n")
    b, h = xla_gpu.compile(text, target="cpu", cache=False).run(x)
    np.testing.assert_array_equal(b, x.astype(ml_dtypes.bfloat16).astype(np.float32))
    via_f16 = x.astype(np.float16).astype(np.float32)
    normal = np.abs(via_f16) >= 2.0 ** -14
    np.testing.assert_array_equal(h[normal], via_f16[normal])
    assert np.all(h[~normal] == 0)


def test_reduce_precision_needs_valid_widths():
    text = ("HloModule m\nf {\n p = f32[4] parameter(0)\n"
            " ROOT r = f32[4] reduce-precision(p), exponent_bits=0, mantissa_bits=3\n}\n")
    with pytest.raises(xla_gpu.XlaGpuError, match="exponent_bits"):
        xla_gpu.compile(text, target="cpu", cache=False)

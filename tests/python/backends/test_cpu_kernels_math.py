"""The cpu target's vectorizable math (xla-approximate-host-math): error
bounds against numpy in float64 over the whole f32 range (every binade,
subnormals, NaN, infinities, signed zeros), f16/bf16 through f32, and no
libm call left for the approximated functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xla_gpu

ml_dtypes = pytest.importorskip("ml_dtypes")

# Max error in ulp of the exact result (the pass's header states them; a
# little headroom for the FMA-or-not difference between hosts). tanh is a
# rational approximation with XLA:CPU's accuracy (4.26 ulp measured here;
# XLA:CPU's jit: 4.5).
_BOUNDS = {
    "exponential": 1.5, "exponential-minus-one": 2.0, "log": 1.5,
    "log-plus-one": 3.0, "tanh": 4.5, "erf": 3.0,
}
_REFERENCE = {
    "exponential": np.exp, "exponential-minus-one": np.expm1, "log": np.log,
    "log-plus-one": np.log1p, "tanh": np.tanh,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
}

_SPECIAL = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-39, -1e-39,
     2.0 ** -126, -(2.0 ** -126), 1e-30, 1e-8, -1e-8, 6e-8, 1e-7, 1e-3, 0.5, -0.5,
     1.0, -1.0, 2.0, 3.0, 3.99, 4.0, 4.01, 9.0, 9.02, 9.1, 10.0, 20.0, -20.0,
     -20.5, 16.6, 17.0, 87.0, 88.0, 88.72, 88.7228, 88.73, 89.0, -87.3, -88.0,
     -100.0, -103.9, -104.0, -104.5, -150.0, 1e10, -1e10, 3.4e38, -3.4e38,
     -0.9999, -1.0 + 2 ** -24, 0.34657, -0.34657, 1.41421, 0.70710],
    np.float32)


def _sweep(size: int = 1 << 16) -> np.ndarray:
    """Values from every binade (random bit patterns, both signs, NaN and
    infinity excluded), then the special values and a dense stretch of the
    interesting middle."""
    rng = np.random.default_rng(17)
    bits = rng.integers(0, 0x7f800000, size // 2, dtype=np.int64).astype(np.uint32)
    magnitudes = bits.view(np.float32)
    dense = np.linspace(-12, 12, size // 4, dtype=np.float32)
    return np.concatenate([magnitudes, -magnitudes, dense, _SPECIAL]).astype(np.float32)


def _unary(op: str, type_: str, n: int) -> str:
    return f"""HloModule m
fused {{
  p = {type_}[{n}] parameter(0)
  ROOT y = {type_}[{n}] {op}(p)
}}
"""


def _ulp_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in ulp of the f32 nearest `want` (the smallest
    subnormal where that is 0)."""
    nearest = np.abs(want).astype(np.float32)
    ulp = np.spacing(nearest).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / ulp


@pytest.mark.parametrize("op", sorted(_BOUNDS))
def test_f32_error_bound_over_the_whole_range(op):
    x = _sweep()
    if op == "log":
        x = np.abs(x)
    (got,) = xla_gpu.compile(_unary(op, "f32", x.size), target="cpu").run(x)
    with np.errstate(all="ignore"):
        want = _REFERENCE[op](x.astype(np.float64))
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{op}: NaN where numpy has none")
    # Results beyond f32's range round to infinity; those must match exactly.
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    infinite = np.isinf(want32)
    np.testing.assert_array_equal(got[infinite], want32[infinite])
    # Signed zeros stay signed (tanh(-0) = -0, expm1(-0) = -0, ...).
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want32[zero]))
    finite = ~nan & ~infinite
    errors = _ulp_errors(got[finite], want[finite])
    worst = int(np.argmax(errors))
    assert errors[worst] <= _BOUNDS[op], (
        f"{op}({x[finite][worst]!r}) = {got[finite][worst]!r}, exact "
        f"{want[finite][worst]!r}: {errors[worst]:.2f} ulp > {_BOUNDS[op]}")


@pytest.mark.parametrize("op", ["tanh", "exponential", "log-plus-one"])
@pytest.mark.parametrize("type_,dtype,rtol", [("bf16", ml_dtypes.bfloat16, 2 ** -8),
                                              ("f16", np.float16, 2 ** -11)])
def test_narrow_floats_round_the_f32_result_once(op, type_, dtype, rtol):
    x = np.linspace(-6, 6, 4096).astype(dtype)
    (got,) = xla_gpu.compile(_unary(op, type_, x.size), target="cpu").run(x)
    with np.errstate(all="ignore"):
        want = _REFERENCE[op](x.astype(np.float64))
    ok = np.isfinite(want) & (np.abs(want) < float(ml_dtypes.finfo(dtype).max))
    np.testing.assert_allclose(got[ok].astype(np.float64), want[ok], rtol=rtol, atol=1e-30)


def test_approximated_functions_leave_no_libm_call():
    text = """HloModule m
fused {
  p = f32[256] parameter(0)
  t = f32[256] tanh(p)
  e = f32[256] exponential(t)
  l = f32[256] log(e)
  m = f32[256] exponential-minus-one(l)
  q = f32[256] log-plus-one(m)
  ROOT r = f32[256] erf(q)
}
"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    lowered = exe.host_mlir
    for name in ("tanhf", "expf", "logf", "expm1f", "log1pf", "erff", "llvm.intr.exp",
                 "llvm.intr.log", "llvm.intr.tanh"):
        assert name not in lowered, name
    x = np.linspace(-3, 3, 256, dtype=np.float32)
    (got,) = exe.run(x)
    v = x.astype(np.float64)
    want = _REFERENCE["erf"](np.log1p(np.expm1(np.log(np.exp(np.tanh(v))))))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_other_math_stays_exact_libm():
    # sin of a huge argument needs the full range reduction of libm.
    x = np.array([1e10, -3e5, 1e30, 0.5, np.nan], np.float32)
    (got,) = xla_gpu.compile(_unary("sine", "f32", x.size), target="cpu").run(x)
    np.testing.assert_allclose(got, np.sin(x.astype(np.float64)), rtol=1e-6)


def test_tanh_is_exactly_one_where_f32_rounds_it_to_one():
    # From 9.02 on, tanh(x) rounds to 1 in f32; 1 - tanh(x)^2 (tanh's
    # derivative, what jax's grad computes) must then be 0 as with XLA, not
    # the 1.2e-7 a result one ulp below 1 gives.
    x = np.concatenate([np.linspace(9.02, 200, 2048), [1e30, np.inf]]).astype(np.float32)
    x = np.concatenate([x, -x])
    (got,) = xla_gpu.compile(_unary("tanh", "f32", x.size), target="cpu").run(x)
    np.testing.assert_array_equal(got, np.sign(x))
    np.testing.assert_array_equal(np.tanh(x.astype(np.float64)).astype(np.float32), np.sign(x))

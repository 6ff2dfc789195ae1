"""XLA:CPU's "TopK" custom call: (values, s32 indices) of the k first
elements of each row under the call's comparator, ties by the lower index.

XLA writes the comparator over (value, index) pairs (4 parameters) or over
the values alone (2 parameters); both must compile and run. XLA's own
optimized module for `lax.top_k` is compiled for the cpu target and compared
with jax, NaNs included (XLA orders floats by their bits: NaN above +inf,
-NaN below -inf); the reference interpreter must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo


def _rows(shape, dtype, seed: int, nans: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Few distinct values: ties are frequent, so their order is checked too.
    x = rng.integers(-6, 6, size=shape).astype(dtype)
    if nans:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, size=max(1, flat.size // 7), replace=False)] = np.nan
        flat[rng.choice(flat.size, size=max(1, flat.size // 11), replace=False)] = -np.nan
        flat[:2] = [np.inf, -np.inf]
    return x


def _bits(values: np.ndarray) -> np.ndarray:
    """The bit patterns (NaN signs and payloads compared too)."""
    values = np.ascontiguousarray(values)
    return values.view(np.dtype(f"u{values.dtype.itemsize}"))


def _check(text: str, x: np.ndarray, want_values: np.ndarray, want_indices: np.ndarray):
    exe = xla_gpu.compile(text, target="cpu")
    values, indices = exe.run(x)
    ref = hlo.evaluate(hlo.parse_module(text), x)
    for where, (v, i) in (("compiled", (values, indices)), ("interpreter", ref)):
        assert v.dtype == want_values.dtype and i.dtype == want_indices.dtype, where
        np.testing.assert_array_equal(_bits(v), _bits(want_values), err_msg=where)
        np.testing.assert_array_equal(i, want_indices, err_msg=where)


@pytest.mark.parametrize("shape, k, dtype, nans", [
    ((10,), 3, np.float32, False),
    ((4, 100), 1, np.float32, True),
    ((3, 5, 50), 7, np.float32, True),
    ((2, 3000), 40, np.float32, False),     # longer than one sort tile: a sort
    # Longer than a tile, k <= 16: one kernel, each thread's best k of its
    # part of the row, then the tile sorts the candidates.
    ((2, 3000), 8, np.float32, True),
    ((3, 5000), 1, np.float32, True),
    ((1, 70000), 16, np.float32, True),
    ((4, 2049), 3, np.float32, False),
    ((3, 4100), 5, "bfloat16", False),
    # XLA:CPU sorts other element types (no TopK call): the same answers.
    ((6, 64), 20, np.float64, True),
    ((4, 100), 3, np.int32, False),
    ((3, 50), 5, "bfloat16", False),
])
def test_xla_cpu_top_k_module(shape, k, dtype, nans):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_platforms", "cpu")
    if dtype == "bfloat16":
        dtype = jax.numpy.bfloat16
    x = _rows(shape, dtype, seed=sum(shape) + k, nans=nans)
    f = jax.jit(lambda v: jax.lax.top_k(v, k))
    if dtype == np.float64:
        if not hasattr(jax, "enable_x64"):
            pytest.skip("this jax has no enable_x64 context")
        with jax.enable_x64(True):
            text = f.lower(x).compile().as_text()
            values, indices = (np.asarray(a) for a in f(x))
    else:
        text = f.lower(x).compile().as_text()
        values, indices = (np.asarray(a) for a in f(x))
    assert dtype != np.float32 or 'custom_call_target="TopK"' in text
    _check(text, x, values, indices)


_TWO_PARAMETER = """HloModule top_k_values_only

greater_total_order {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  zero = s32[] constant(0)
  max = s32[] constant(2147483647)
  ai = s32[] bitcast(a)
  bi = s32[] bitcast(b)
  a_negative = pred[] compare(ai, zero), direction=LT
  b_negative = pred[] compare(bi, zero), direction=LT
  a_flipped = s32[] xor(max, ai)
  b_flipped = s32[] xor(max, bi)
  a_key = s32[] select(a_negative, a_flipped, ai)
  b_key = s32[] select(b_negative, b_flipped, bi)
  ROOT gt = pred[] compare(a_key, b_key), direction=GT
}

ENTRY main {
  x = f32[@SHAPE@]{@LAYOUT@} parameter(0)
  ROOT top = (f32[@OUT@]{@LAYOUT@}, s32[@OUT@]{@LAYOUT@}) custom-call(x), custom_call_target="TopK", called_computations={greater_total_order}
}
"""


def _reference_top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Greatest first by the bit-pattern order XLA's comparator uses, ties
    by the lower index."""
    bits = x.view(np.int32).astype(np.int64)
    key = np.where(bits < 0, 2147483647 ^ bits, bits)
    order = np.argsort(-key, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


@pytest.mark.parametrize("shape, k", [((12,), 5), ((3, 40), 6), ((2, 2, 9), 9),
                                      ((2, 2500), 17), ((2, 2500), 9), ((2, 3, 2100), 2)])
def test_comparator_over_values_only(shape, k):
    x = _rows(shape, np.float32, seed=k, nans=True)
    out = shape[:-1] + (k,)
    rank = len(shape)
    text = (_TWO_PARAMETER.replace("@SHAPE@", ",".join(map(str, shape)))
            .replace("@OUT@", ",".join(map(str, out)))
            .replace("@LAYOUT@", ",".join(map(str, range(rank - 1, -1, -1)))))
    values, indices = _reference_top_k(x, k)
    _check(text, x, values, indices)

"""bf16 arithmetic on the cpu target: computed in f32 and rounded to
nearest even once per op; a value that is exactly a bf16 already (the max
of two bf16 values: the ReLU after an add) is converted back by taking its
high half. Checked against the reference interpreter, specials included."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import xla_gpu
from xla_gpu import hlo
from xla_gpu.hlo.numerics import compare

_BIAS_RELU = """HloModule m
fused {
  x = bf16[4,64] parameter(0)
  b = bf16[64] parameter(1)
  bb = bf16[4,64] broadcast(b), dimensions={1}
  s = bf16[4,64] add(x, bb)
  z = bf16[] constant(0)
  zb = bf16[4,64] broadcast(z), dimensions={}
  m = bf16[4,64] maximum(s, zb)
  ROOT n = bf16[4,64] minimum(m, bb)
}
"""


def _bf16(values) -> np.ndarray:
    return np.asarray(values, np.float32).astype(ml_dtypes.bfloat16)


def test_relu_after_add_matches_the_interpreter_with_specials():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 64)).astype(np.float32) * 3
    specials = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3.3895314e38, -3.3895314e38,
                1e-40, -1e-40, 1.00390625, 255.5]
    x.flat[:len(specials)] = specials
    b = rng.standard_normal(64).astype(np.float32)
    b[:4] = [np.inf, -np.inf, np.nan, 0.0]
    inputs = [_bf16(x), _bf16(b)]
    exe = xla_gpu.compile(_BIAS_RELU, target="cpu", cache=False)
    (got,) = exe.run(*inputs)
    (want,) = hlo.evaluate(hlo.parse_module(_BIAS_RELU), *inputs)
    assert compare(np.asarray(got), want, "bf16", 0) is None
    # Exact: the same bits wherever the result is a number.
    numbers = ~np.isnan(np.asarray(want, np.float32))
    assert np.array_equal(np.asarray(got).view(np.uint16)[numbers],
                          np.asarray(want).view(np.uint16)[numbers])

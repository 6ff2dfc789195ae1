"""select-and-scatter end to end on the cpu target: the optimization
pipeline expands it (reduce-window over the operand and its positions,
then a scatter), and the variadic reduce-window that results is the root
of a loop fusion of its own. Checked against the reference interpreter,
which evaluates select-and-scatter directly."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.numerics import compare, random_inputs

MAX_POOL_GRAD = """
HloModule max_pool_grad
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY main {
  x = f32[2,9,8,3] parameter(0)
  g = f32[2,5,4,3] parameter(1)
  zero = f32[] constant(0)
  ROOT r = f32[2,9,8,3] select-and-scatter(x, g, zero), window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, select=ge, scatter=add
}
"""

# The reduce-window the expander makes, alone in a fusion: a value and the
# positions of the window's largest element (the first one on ties).
ARGMAX_WINDOW = """
HloModule argmax_window
pick {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  keep = pred[] compare(v0, v1), direction=GE
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
fused {
  x = f32[6,10] parameter(0)
  n = s32[6,10] iota(), iota_dimension=1
  lowest = f32[] constant(-inf)
  none = s32[] constant(-1)
  ROOT w = (f32[6,5], s32[6,5]) reduce-window(x, n, lowest, none), window={size=1x2 stride=1x2}, to_apply=pick
}
ENTRY main {
  x = f32[6,10] parameter(0)
  ROOT f = (f32[6,5], s32[6,5]) fusion(x), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("text", [MAX_POOL_GRAD, ARGMAX_WINDOW], ids=["max_pool_grad",
                                                                       "argmax_window"])
def test_matches_the_interpreter_on_the_cpu_target(text):
    module = parse_module(text)
    args = random_inputs(module.entry, seed=3)
    expected = evaluate(module, *args)
    exe = xla_gpu.compile(text, target="cpu")
    got = exe.run(*args)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    leaves = module.entry.root.shape.leaves()
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape
        if np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(g, e)
        else:
            assert compare(g, e, leaves[k].element_type, k) is None

"""Block sizes on the host (grid emulation), chosen so that LLVM can
vectorize a block's emulated thread loop: loops over shapes with short
minor rows take blocks of whole rows (the fewest minor dimensions that make
32 threads or more: no power-of-two remainder of an index wraps inside the
thread loop, which keeps it scalar), and column reductions a block size
that divides the kept columns (no idle threads, whose guard keeps the loop
scalar). The kernels still match the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.hlo.numerics import compare, random_inputs

# An im2col over 3 channels and a 3x3 window: [n, h, w, 3, 3, 3].
IM2COL = """HloModule m
fused {
  x = f32[4,8,8,3] parameter(0)
  zero = f32[] constant(0)
  p = f32[4,10,10,3] pad(x, zero), padding=0_0x1_1x1_1x0_0
""" + "".join(
    f"  s{k} = f32[4,8,8,3] slice(p), slice={{[0:4], [{k // 3}:{k // 3 + 8}], "
    f"[{k % 3}:{k % 3 + 8}], [0:3]}}\n  r{k} = f32[4,8,8,1,3] reshape(s{k})\n" for k in range(9)) + """\
  c = f32[4,8,8,9,3] concatenate(r0, r1, r2, r3, r4, r5, r6, r7, r8), dimensions={3}
  ROOT o = f32[4,8,8,3,3,3] reshape(c)
}
ENTRY e {
  x = f32[4,8,8,3] parameter(0)
  ROOT f = f32[4,8,8,3,3,3] fusion(x), kind=kLoop, calls=fused
}
"""

# Rows of 3 (an RGB image's pixels) scaled: 32 pixels of 3 make a block.
RGB = """HloModule m
fused {
  x = f32[64,64,3] parameter(0)
  two = f32[] constant(2)
  b = f32[64,64,3] broadcast(two), dimensions={}
  ROOT y = f32[64,64,3] multiply(x, b)
}
ENTRY e {
  x = f32[64,64,3] parameter(0)
  ROOT f = f32[64,64,3] fusion(x), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("text,threads", [(IM2COL, 8 * 27), (RGB, 64 * 3)],
                         ids=["im2col", "rgb"])
def test_short_rows_take_blocks_of_whole_rows(text, threads):
    module = hlo.parse_module(text)
    spec = select_fusion(module, None)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert exe.launch_dims["threads"] == threads
    inputs = random_inputs(spec.computation, seed=5)
    got = exe.run(*inputs)
    want = hlo.evaluate(spec.computation, *inputs)
    for k, (g, w, s) in enumerate(zip(got, want, spec.output_shapes)):
        assert compare(np.asarray(g), np.asarray(w), s.element_type, k) is None


# A GroupNorm backward's sum over 96 channels: [n, h, w, 96] -> [96].
COLUMN_SUM_96 = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  x = f32[16,8,8,96] parameter(0)
  y = f32[16,8,8,96] parameter(1)
  m = f32[16,8,8,96] multiply(x, y)
  zero = f32[] constant(0)
  ROOT r = f32[96] reduce(m, zero), dimensions={0,1,2}, to_apply=add
}
ENTRY e {
  x = f32[16,8,8,96] parameter(0)
  y = f32[16,8,8,96] parameter(1)
  ROOT f = f32[96] fusion(x, y), kind=kInput, calls=fused
}
"""


def test_column_reductions_take_blocks_without_idle_threads():
    module = hlo.parse_module(COLUMN_SUM_96)
    spec = select_fusion(module, None)
    exe = xla_gpu.compile(COLUMN_SUM_96, target="cpu", cache=False)
    assert exe.spec.emitter == "reduction"
    assert (exe.launch_dims["blocks"], exe.launch_dims["threads"]) == (1, 96)
    inputs = random_inputs(spec.computation, seed=5)
    got = exe.run(*inputs)
    want = hlo.evaluate(spec.computation, *inputs)
    assert compare(np.asarray(got[0]), np.asarray(want[0]), "f32", 0,
                   scale_relative=True) is None

"""Large column reductions on the cpu target take a thread per kept element
(ThreadPerColumnReductionEmitter: contiguous SIMD rows, no shared tile, no
shuffle); small ones, and every cuda kernel, keep XLA's column variants.
Results against the reference interpreter: sums, a variadic argmax, side
outputs, an epilogue, bf16 inputs, kept sizes that are not a multiple of
the block."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.analysis.device import H200, HOST_EMULATION
from xla_gpu.emitters.reduction import (ColumnReductionEmitter, SmallColumnReductionEmitter,
                                        ThreadPerColumnReductionEmitter, reduction_emitter)
from xla_gpu.hlo.numerics import compare, random_inputs

_ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def _sum_module(dims: str, reduced: str, kept: str, element: str = "f32") -> str:
    convert = f"  c = f32[{dims}] convert(x)\n" if element != "f32" else ""
    operand = "c" if element != "f32" else "x"
    return f"""HloModule m
{_ADD}
fused {{
  x = {element}[{dims}] parameter(0)
{convert}  z = f32[] constant(0)
  ROOT r = f32[{kept}] reduce({operand}, z), dimensions={{{reduced}}}, to_apply=add
}}
ENTRY e {{
  p = {element}[{dims}] parameter(0)
  ROOT f = f32[{kept}] fusion(p), kind=kInput, calls=fused
}}
"""


def _variant(text: str, device):
    from xla_gpu.analysis.fusion import select_fusion
    return type(reduction_emitter(select_fusion(hlo.parse_module(text), device=device)))


def _check(text: str, seed: int = 0):
    module = hlo.parse_module(text)
    args = random_inputs(module.entry, seed)
    got = xla_gpu.compile(text, target="cpu", cache=False).run(*args)
    want = hlo.evaluate(module, *args)
    want = want if isinstance(want, (list, tuple)) else [want]
    types = [leaf.element_type for leaf in module.entry.root.shape.leaves()]
    for n, (g, w, t) in enumerate(zip(got, want, types)):
        mismatch = compare(np.asarray(g), np.asarray(w), t, n, scale_relative=True)
        assert mismatch is None, mismatch


@pytest.mark.parametrize("dims,reduced,kept", [
    ("1024,512", "0", "512"),          # the corpus' reduce_column
    ("600,300", "0", "300"),           # kept not a multiple of the block
    ("4,512,40", "1", "4,40"),         # K0 > 1
    ("64,32,48", "0,1", "48"),         # two reduced dims
])
def test_large_column_sums_take_a_thread_per_column(dims, reduced, kept):
    text = _sum_module(dims, reduced, kept)
    assert _variant(text, HOST_EMULATION) is ThreadPerColumnReductionEmitter
    assert _variant(text, H200) in (ColumnReductionEmitter, SmallColumnReductionEmitter)
    _check(text)


def test_bf16_column_sum():
    text = _sum_module("512,256", "0", "256", "bf16")
    assert _variant(text, HOST_EMULATION) is ThreadPerColumnReductionEmitter
    _check(text, seed=4)


def test_small_columns_keep_the_gpu_variants_on_the_host():
    # Below HOST_SMALL_MIN_ELEMENTS (2048) input elements, or kept rows
    # narrower than a SIMD register.
    assert _variant(_sum_module("16,64", "0", "64"), HOST_EMULATION) is ColumnReductionEmitter
    assert _variant(_sum_module("4096,4", "0", "4"), HOST_EMULATION) is \
        SmallColumnReductionEmitter


ARGMAX_COLUMNS = """HloModule m
argmax {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(i, j), direction=LT
  tie = pred[] and(eq, lt)
  pick = pred[] or(gt, tie)
  v = f32[] select(pick, a, b)
  k = s32[] select(pick, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}
fused {
  x = f32[512,256] parameter(0)
  io = s32[512,256] iota(), iota_dimension=0
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[256], s32[256]) reduce(x, io, ninf, zero), dimensions={0}, to_apply=argmax
}
ENTRY e {
  p = f32[512,256] parameter(0)
  ROOT f = (f32[256], s32[256]) fusion(p), kind=kInput, calls=fused
}
"""

SIDE_OUTPUT_AND_EPILOGUE = """HloModule m
""" + _ADD + """
fused {
  x = f32[384,320] parameter(0)
  e = f32[384,320] exponential(x)
  z = f32[] constant(0)
  r = f32[320] reduce(e, z), dimensions={0}, to_apply=add
  l = f32[320] log(r)
  ROOT t = (f32[320], f32[384,320]) tuple(l, e)
}
ENTRY e {
  p = f32[384,320] parameter(0)
  ROOT f = (f32[320], f32[384,320]) fusion(p), kind=kInput, calls=fused
}
"""


@pytest.mark.parametrize("text", [ARGMAX_COLUMNS, SIDE_OUTPUT_AND_EPILOGUE],
                         ids=["variadic-argmax", "side-output-epilogue"])
def test_variadic_side_outputs_and_epilogues(text):
    assert _variant(text, HOST_EMULATION) is ThreadPerColumnReductionEmitter
    _check(text, seed=2)


def test_row_reductions_on_the_host_take_longer_scalar_slices():
    # Row sums over rows of 300 (longer than a thread walks alone): a warp
    # per row, one element per load (the GPU's configuration loads 2 per
    # thread); below 4096 elements the GPU's configuration runs on the
    # host too.
    from xla_gpu.analysis.fusion import select_fusion
    from xla_gpu.emitters.reduction import RowReductionEmitter
    text = _sum_module("64,300", "1", "64")
    host = reduction_emitter(select_fusion(hlo.parse_module(text), device=HOST_EMULATION))
    gpu = reduction_emitter(select_fusion(hlo.parse_module(text), device=H200))
    assert type(host) is type(gpu) is RowReductionEmitter
    assert (host.threads_per_row, host.vector) == (32, 1)
    assert (gpu.threads_per_row, gpu.vector) == (32, 2)
    small = reduction_emitter(select_fusion(hlo.parse_module(_sum_module("8,300", "1", "8")),
                                            device=HOST_EMULATION))
    assert small.vector == 2
    _check(text, seed=6)

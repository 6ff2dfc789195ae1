"""The HLO passes that prepare a program's sorts, top-k, convolutions and
loop state for the kernels and buffers (xla_gpu.hlo.passes:
StableSortExpander, TopkDecomposer, ConvolutionLowering,
LoopStateOrdering), each on a small module against the reference
interpreter; the one kernel-cache key recipe; and HLO pass failures as
errors, with the per-op fallback only when asked for."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo, kernel_compiler
from xla_gpu.analysis import sort as sort_plan
from xla_gpu.errors import CompileError
from xla_gpu.hlo.passes.convolution_lowering import ConvolutionLowering
from xla_gpu.hlo.passes.loop_state_ordering import LoopStateOrdering
from xla_gpu.hlo.passes.stable_sort_expander import StableSortExpander
from xla_gpu.hlo.passes.topk_decomposer import TopkDecomposer

STABLE_SORT = """HloModule m
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[2,40] parameter(0)
  ROOT s = f32[2,40] sort(x), dimensions={1}, is_stable=true, to_apply=less
}
"""


def _ties(shape) -> np.ndarray:
    return np.random.default_rng(3).integers(0, 4, shape).astype(np.float32)


def _opcodes(module) -> list[str]:
    return [i.opcode for i in module.entry.instructions]


def test_stable_sort_expander_adds_the_tie_break_operand(monkeypatch):
    # A 16-element tile: 40 elements take several kernels, so the index
    # must be a buffer.
    monkeypatch.setattr(sort_plan, "MAX_TILE", 16)
    module = hlo.parse_module(STABLE_SORT)
    x = _ties((2, 40))
    expected = hlo.evaluate(module, x)
    assert StableSortExpander().run(module)
    (sort,) = [i for i in module.entry.instructions if i.opcode == "sort"]
    assert len(sort.operands) == 2 and sort.operands[1].opcode == "iota"
    assert not sort.attrs["is_stable"]
    assert len(sort.attrs["to_apply"].parameters) == 4
    np.testing.assert_array_equal(hlo.evaluate(module, x), expected)


def test_stable_sort_expander_leaves_one_kernel_sorts_alone():
    module = hlo.parse_module(STABLE_SORT)     # 40 elements: one tile
    assert not StableSortExpander().run(module)
    assert _opcodes(module) == ["parameter", "sort"]


TOPK = """HloModule m
ENTRY e {
  x = f32[3,40] parameter(0)
  ROOT t = (f32[3,5], s32[3,5]) topk(x), k=5, largest=true
}
"""


def test_topk_decomposer_rewrites_rows_longer_than_a_tile(monkeypatch):
    # k = 5 above TOPK_SELECT_MAX_K (else one kernel selects per thread).
    monkeypatch.setattr(sort_plan, "MAX_TILE", 16)
    monkeypatch.setattr(sort_plan, "TOPK_SELECT_MAX_K", 4)
    module = hlo.parse_module(TOPK)
    x = _ties((3, 40))
    expected = hlo.evaluate(module, x)
    assert TopkDecomposer().run(module)
    assert "topk" not in _opcodes(module) and "sort" in _opcodes(module)
    for got, want in zip(hlo.evaluate(module, x), expected):
        np.testing.assert_array_equal(got, want)


def test_topk_decomposer_keeps_the_one_kernel_topk():
    module = hlo.parse_module(TOPK)
    assert not TopkDecomposer().run(module)
    assert "topk" in _opcodes(module)


CONVOLUTION = """HloModule m
ENTRY e {
  x = f32[1,6,6,2] parameter(0)
  w = f32[3,3,2,4] parameter(1)
  ROOT c = f32[1,4,4,4] convolution(x, w), window={size=3x3}, dim_labels=b01f_01io->b01f
}
"""


def test_convolution_lowering_makes_im2col_and_a_gemm(monkeypatch):
    from xla_gpu.hlo.passes import convolution_lowering
    module = hlo.parse_module(CONVOLUTION)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in module.entry.parameters]
    (expected,) = hlo.evaluate(module, *args)
    assert not ConvolutionLowering().run(module)         # small: a direct kernel
    monkeypatch.setattr(convolution_lowering, "DIRECT_CONVOLUTION_MACS", 0)
    assert ConvolutionLowering().run(module)
    ops = _opcodes(module)
    assert "convolution" not in ops and "dot" in ops and "fusion" in ops
    (got,) = hlo.evaluate(module, *args)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# A filter gradient as jax writes it: the window (the image, 12x12) larger
# than the output (the kernel, 3x3).
FILTER_GRADIENT = """HloModule m
ENTRY e {
  x = f32[8,12,12,16] parameter(0)
  g = f32[8,12,12,32] parameter(1)
  ROOT c = f32[3,3,16,32] convolution(x, g), window={size=12x12 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf
}
"""


def test_convolution_lowering_on_the_host_and_of_a_filter_gradient():
    """On the cpu target (emulates_grid) a convolution far below the
    direct-kernel threshold is lowered too; a filter gradient's patches
    are gathered one slice per output position (9), not per window
    position (144, each a compare for every element of the patch kernel)."""
    module = hlo.parse_module(FILTER_GRADIENT)
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in module.entry.parameters]
    (expected,) = hlo.evaluate(module, *args)
    assert not ConvolutionLowering().run(module)
    assert ConvolutionLowering(emulates_grid=True).run(module)
    pieces = [len(i.operands) for c in module.computations for i in c.instructions
              if i.opcode == "concatenate"]
    assert pieces == [9]
    (got,) = hlo.evaluate(module, *args)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


LOOP = """HloModule m
cond {
  p = (f32[8], f32[8], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=2
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (f32[8], f32[8], s32[]) parameter(0)
  a = f32[8] get-tuple-element(p), index=0
  b = f32[8] get-tuple-element(p), index=1
  i = s32[] get-tuple-element(p), index=2
  new_a = f32[8] add(a, a)
  new_b = f32[8] multiply(a, b)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (f32[8], f32[8], s32[]) tuple(new_a, new_b, j)
}
ENTRY e {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  zero = s32[] constant(0)
  init = (f32[8], f32[8], s32[]) tuple(a, b, zero)
  ROOT w = (f32[8], f32[8], s32[]) while(init), condition=cond, body=body
}
"""


def test_loop_state_ordering_writes_after_the_old_value_is_read():
    # new_a may take a's buffer (it reads a only at the element it writes),
    # but new_b still reads the old a: new_a must run after new_b.
    module = hlo.parse_module(LOOP)
    assert LoopStateOrdering().run(module)
    body = module.computation("body")
    new_a = body.find("new_a")
    assert "new_b" in new_a.attrs["control-predecessors"]
    assert not LoopStateOrdering().run(module)          # already ordered


def test_loop_state_read_through_a_remat_barrier_is_read_before_it_is_overwritten():
    """A remat in a scan body passes the old loop state through a tuple and
    an optimization barrier (kept through the pipeline): reading the
    barrier's element reads the old value, so the new value is written
    after it (a sharded GPT step with remat blocks in a scan failed to
    compile: "the module needs a copy there"), and the loop computes what
    the interpreter does."""
    text = """HloModule m
body {
  s = (s32[], f32[64], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[64] get-tuple-element(s), index=1
  t = (f32[64]) tuple(x)
  b = (f32[64]) opt-barrier(t)
  r = f32[64] get-tuple-element(b), index=0
  e = f32[64] exponential(r)
  y = f32[64] get-tuple-element(s), index=2
  m = f32[64] multiply(y, e)
  n = f32[64] negate(x)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT o = (s32[], f32[64], f32[64]) tuple(j, n, m)
}
cond {
  s = (s32[], f32[64], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(i, k), direction=LT
}
ENTRY main {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  z = s32[] constant(0)
  t = (s32[], f32[64], f32[64]) tuple(z, x, y)
  w = (s32[], f32[64], f32[64]) while(t), condition=cond, body=body
  a = f32[64] get-tuple-element(w), index=1
  c = f32[64] get-tuple-element(w), index=2
  ROOT out = (f32[64], f32[64]) tuple(a, c)
}"""
    import xla_gpu
    x = np.linspace(-1, 1, 64).astype(np.float32)
    y = np.ones(64, np.float32)
    want = hlo.evaluate(hlo.parse_module(text), x, y)
    got = xla_gpu.compile(text, target="cpu", cache=False).run(x, y)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_an_array_loop_state_is_written_after_its_other_readers():
    """A loop whose state is one array (not a tuple): the root writes the
    parameter's buffer, so a side effect that reads the old value (a
    jax.debug.print in the body) runs first; a reader that needs the new
    value as well makes the root a copy instead. Both run as the
    interpreter says."""
    text = """HloModule m
body {
  p = s32[4] parameter(0)
  shown = () custom-call(p), custom_call_target="record_state", custom_call_has_side_effect=true
  one = s32[] constant(1)
  ones = s32[4] broadcast(one), dimensions={}
  ROOT next = s32[4] add(p, ones)
}
cond {
  p = s32[4] parameter(0)
  first = s32[1] slice(p), slice={[0:1]}
  f = s32[] reshape(first)
  three = s32[] constant(3)
  ROOT lt = pred[] compare(f, three), direction=LT
}
ENTRY e {
  x = s32[4] parameter(0)
  ROOT w = s32[4] while(x), condition=cond, body=body
}"""
    module = hlo.parse_module(text)
    assert LoopStateOrdering().run(module)
    body = module.computation("body")
    assert body.find("next").attrs["control-predecessors"] == ("shown",)
    from xla_gpu.ffi.registry import register_custom_call, unregister_custom_call
    seen = []
    register_custom_call("record_state", lambda state: seen.append(state.tolist()))
    try:
        exe = xla_gpu.compile(text, target="cpu")
        (out,) = exe.run(np.zeros(4, np.int32))
        assert out.tolist() == [3] * 4
        assert seen == [[0] * 4, [1] * 4, [2] * 4]
    finally:
        unregister_custom_call("record_state")


# -- the kernel compiler's key ----------------------------------------------------------


NEGATE = """HloModule m
fused {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
"""


def test_one_key_recipe_for_programs_and_single_fusions():
    from xla_gpu.analysis.device import RTX_A6000
    from xla_gpu.analysis.fusion import select_fusion
    program = xla_gpu.compile("""HloModule prog
ENTRY e {
  x = f32[64] parameter(0)
  n = f32[64] negate(x)
  ROOT t = (f32[64], f32[64]) tuple(n, n)
}""", target="cpu")
    fusion = xla_gpu.compile(NEGATE, target="cpu")
    # The same computation under other names: the same kernel.
    assert fusion.key in program.kernels
    comp = select_fusion(hlo.parse_module(NEGATE)).computation
    assert kernel_compiler.kernel_key(comp, "cpu", "sm_90") == fusion.key
    others = {kernel_compiler.kernel_key(comp, "cuda", "sm_90"),
              kernel_compiler.kernel_key(comp, "cpu", "sm_80"),
              kernel_compiler.kernel_key(comp, "cpu", "sm_90", device=RTX_A6000),
              kernel_compiler.kernel_key(comp, "cpu", "sm_90", config=("tile", 16))}
    assert fusion.key not in others and len(others) == 4


# -- HLO pass failures --------------------------------------------------------------------


PLAIN = """HloModule plain
ENTRY e {
  x = f32[16] parameter(0)
  n = f32[16] negate(x)
  ROOT y = f32[16] exponential(n)
}
"""


def test_a_failing_hlo_pass_is_an_error_naming_it(monkeypatch):
    from xla_gpu.hlo.passes import dce

    def broken(self, module):
        raise AssertionError("a pass bug")

    monkeypatch.setattr(dce.HloDCE, "run", broken)
    monkeypatch.delenv("XLA_GPU_UNFUSED_FALLBACK", raising=False)
    with pytest.raises(CompileError, match="HLO pass 'dce' failed: AssertionError: a pass bug"):
        xla_gpu.compile(PLAIN, target="cpu", cache=False)
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    exe = xla_gpu.compile(PLAIN, target="cpu", cache=False, fallback_unfused=True)
    assert any("HLO pass 'dce'" in n and "own fusion" in n for n in exe.notes)
    np.testing.assert_allclose(exe.run(x)[0], np.exp(-x), rtol=1e-6)
    monkeypatch.setenv("XLA_GPU_UNFUSED_FALLBACK", "1")
    exe = xla_gpu.compile(PLAIN, target="cpu", cache=False)
    assert any("HLO pass 'dce'" in n for n in exe.notes)

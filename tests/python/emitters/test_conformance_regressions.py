"""Regressions found by running XLA's own emitter tests through xla_gpu
(the conformance run): each case is a small fusion written here, run on the
cpu target against the reference interpreter, with the emitter XLA would
choose and the structure its tests pin where that is the point."""

from __future__ import annotations

import re

import numpy as np
import pytest

import xla_gpu
from xla_gpu import emitters, hlo, ir
from xla_gpu.analysis.device import H200
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type


def _run(text: str, fusion: str | None = None, seed: int = 0, device=None):
    """Compiles `text` for the cpu target, runs it on random inputs and
    checks every output against the interpreter; returns the executable.
    device=H200: the GPU's launch configuration, emulated (the cpu
    target's own picks host layouts for reductions of 2048 elements on)."""
    spec = select_fusion(hlo.parse_module(text), fusion)
    inputs = random_inputs(spec.computation, seed)
    exe = xla_gpu.compile(text, target="cpu", fusion=fusion, cache=False, device=device)
    got = exe.run(*inputs)
    want = hlo.evaluate(spec.computation, *inputs)
    assert len(got) == len(want) == len(spec.output_shapes)
    for k, (g, w, s) in enumerate(zip(got, want, spec.output_shapes)):
        assert np.asarray(g).shape == tuple(s.dims)
        mismatch = compare(np.asarray(g), np.asarray(w), s.element_type, k,
                           tolerance_type(spec.computation, s.element_type),
                           has_reduction(spec.computation))
        assert mismatch is None, f"{exe.spec.emitter} emitter: {mismatch}"
    return exe


def _emit(text: str):
    return emitters.emit(hlo.parse_module(text), ir.Context())


# -- elemental ops ---------------------------------------------------------------

INVERSE_AND_HYPERBOLIC = """
f {
  x = f32[64] parameter(0)
  y = f64[64] parameter(1)
  h = bf16[64] parameter(2)
  a = f32[64] acos(x)
  b = f64[64] acosh(y)
  c = f32[64] asin(x)
  d = f64[64] asinh(y)
  e = bf16[64] atanh(h)
  g = f32[64] cosh(x)
  s = f64[64] sinh(y)
  ROOT t = (f32[64], f64[64], f32[64], f64[64], bf16[64], f32[64], f64[64])
      tuple(a, b, c, d, e, g, s)
}
"""


def test_inverse_trigonometric_and_hyperbolic_ops_match_the_interpreter():
    exe = _run(INVERSE_AND_HYPERBOLIC)
    for op in ("acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh"):
        assert f"math.{op} " in exe.mlir()


def test_a_bitcast_to_another_element_type_reinterprets_the_bits():
    # Integer arithmetic on the bits of halves, as XLA allows bitcast to do.
    text = """
f {
  x = f16[20] parameter(0)
  b = s16[4,5] bitcast(x)
  ROOT a = s16[4,5] add(b, b)
}
"""
    exe = _run(text)
    assert re.search(r"arith\.bitcast %\S+ : f16 to i16", exe.mlir())


# -- outputs and partitioning ----------------------------------------------------

def test_nested_output_tuples_are_flattened_depth_first():
    text = """
add {
  a0 = f32[] parameter(0)
  a1 = f32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = f32[] parameter(3)
  s = f32[] add(a0, b0)
  m = f32[] multiply(a1, b1)
  ROOT t = (f32[], f32[]) tuple(s, m)
}
f {
  p = f32[3,4] parameter(0)
  q = f32[3,4] parameter(1)
  z = f32[] constant(0)
  r = (f32[3], f32[3]) reduce(p, q, z, z), dimensions={1}, to_apply=add
  l = f32[3,4] log(q)
  t1 = (f32[3,4]) tuple(p)
  t2 = ((f32[3,4])) tuple(t1)
  ROOT t = ((f32[3], f32[3]), f32[3,4], ((f32[3,4]))) tuple(r, l, t2)
}
"""
    spec = select_fusion(hlo.parse_module(text))
    assert [list(s.dims) for s in spec.output_shapes] == [[3], [3], [3, 4], [3, 4]]
    _run(text)


def test_a_root_that_other_instructions_read_gets_its_own_function():
    # `m` is an output and feeds the other outputs through a broadcast: in
    # one function with them, the broadcast's function would call it back.
    text = """
add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] add(a, b)
}
f {
  p = f64[4] parameter(0)
  z = f64[] constant(0)
  m = f64[] reduce(p, z), dimensions={0}, to_apply=add
  bm = f64[4] broadcast(m), dimensions={}
  eq = pred[4] compare(p, bm), direction=EQ
  c = f64[4] convert(eq)
  n = f64[] reduce(c, z), dimensions={0}, to_apply=add
  ROOT t = (f64[], f64[]) tuple(n, m)
}
"""
    _run(text)


def test_array_constants_are_read_in_subgraph_functions():
    text = """
f {
  x = s4[3] constant({-2, -3, -4})
  ROOT b = s4[3,31] broadcast(x), dimensions={0}
}
"""
    exe = _run(text)
    assert "arith.constant dense<[-2, -3, -4]> : tensor<3xi8>" in exe.mlir()


# -- in-place dynamic-update-slice ------------------------------------------------

def test_an_in_place_update_written_through_a_bitcast():
    text = """
f {
  in = f32[20,30] parameter(0)
  up = f32[5,6] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  d = f32[20,30] dynamic-update-slice(in, up, i, j)
  ROOT b = f32[600] bitcast(d)
}
"""
    exe = _run(text)
    assert exe.spec.emitter == "in_place_dynamic_update_slice"
    assert exe.spec.aliases == {0: 0} and exe.launch_dims["threads"] == 30


# -- concatenate ----------------------------------------------------------------

CONCATENATES = {
    # A bitcast and a convert after the hero.
    "bitcast_epilogue": """
f {
  p0 = pred[1] parameter(0)
  p1 = pred[1] parameter(1)
  p2 = pred[1] parameter(2)
  c = pred[3] concatenate(p0, p1, p2), dimensions={0}
  b = pred[1,1,3] bitcast(c)
  ROOT r = u32[1,1,3] convert(b)
}
""",
    # The epilogue reads a parameter of its own.
    "side_parameter": """
f {
  p0 = f32[64] parameter(0)
  p1 = f32[192] parameter(1)
  n = f32[64] negate(p0)
  s = f32[128] slice(p1), slice={[32:160]}
  e = f32[128] exponential(s)
  c = f32[192] concatenate(n, e), dimensions={0}
  ROOT a = f32[192] add(c, p1)
}
""",
    # Two concatenates split alike, each with a reshaping epilogue.
    "two_heroes": """
f {
  p0 = f32[2,16,8] parameter(0)
  p1 = f32[2,48,8] parameter(1)
  p2 = f32[2,16,8] parameter(2)
  p3 = f32[2,48,8] parameter(3)
  q = f32[2,64,8] concatenate(p0, p1), dimensions={1}
  k = f32[2,64,8] concatenate(p2, p3), dimensions={1}
  qn = f32[2,64,8] negate(q)
  qb = f32[128,8] bitcast(qn)
  kb = f32[128,8] bitcast(k)
  ROOT t = (f32[128,8], f32[128,8]) tuple(qb, kb)
}
""",
    # One hero, written as is and converted.
    "shared_hero": """
f {
  p0 = f32[4,12] parameter(0)
  p1 = f32[4,20] parameter(1)
  c = f32[4,32] concatenate(p0, p1), dimensions={1}
  v = bf16[4,32] convert(c)
  ROOT t = (f32[4,32], bf16[4,32]) tuple(c, v)
}
""",
}


@pytest.mark.parametrize("name", sorted(CONCATENATES))
def test_concatenate_emitter_takes_position_keeping_epilogues(name):
    exe = _run(CONCATENATES[name])
    assert exe.spec.emitter == "concatenate"
    operands = 3 if name == "bitcast_epilogue" else 2
    assert exe.mlir().count("xla_gpu.loop") == operands


def test_concatenates_of_more_than_four_operands_go_to_the_loop_emitter():
    text = """
f {
  p = f32[4] parameter(0)
  ROOT c = f32[20] concatenate(p, p, p, p, p), dimensions={0}
}
"""
    fusion = select_fusion(hlo.parse_module(text))
    assert (fusion.kind, fusion.hero_kind) == ("loop", "concatenate")


def test_tuples_written_without_a_shape_take_their_operands_shapes():
    # XLA prints some tuples as `t = tuple(a, b)`; operands may come later.
    text = """
f {
  a = f32[3] parameter(0)
  b = s32[] parameter(1)
  outer = tuple(inner, b)
  inner = tuple(a, a)
  ROOT r = (f32[3], f32[3], s32[]) tuple(a, a, b)
}
"""
    comp = hlo.parse_module(text).computations[-1]
    shapes = {i.name: str(i.shape) for i in comp.instructions}
    assert shapes["inner"] == "(f32[3], f32[3])"
    assert shapes["outer"] == "((f32[3], f32[3]), s32[])"
    with pytest.raises(hlo.HloError, match="depends on itself"):
        hlo.parse_module("f {\n  x = tuple(y)\n  ROOT y = tuple(x)\n}\n")


# -- emitter choice -------------------------------------------------------------

def test_sub_byte_transposes_of_the_minor_dimension_use_the_loop_emitter():
    moves_minor = "f {\n  p = s4[64,64] parameter(0)\n  ROOT t = s4[64,64] transpose(p), dimensions={1,0}\n}\n"
    keeps_minor = ("f {\n  p = s4[64,16,4] parameter(0)\n"
                   "  ROOT t = s4[16,64,4] transpose(p), dimensions={1,0,2}\n}\n")
    assert select_fusion(hlo.parse_module(moves_minor)).kind == "loop"
    assert select_fusion(hlo.parse_module(keeps_minor)).kind == "transpose"
    _run(moves_minor)


# -- packed transposes (narrow types) --------------------------------------------

def _transpose(element: str, dims: list[int], perm: list[int], extra: str = "") -> str:
    out = [dims[p] for p in perm]
    shape = lambda d: f"{element}[{','.join(map(str, d))}]"  # noqa: E731
    return (f"f {{\n  p = {shape(dims)} parameter(0)\n"
            f"  t = {shape(out)} transpose(p), dimensions={{{','.join(map(str, perm))}}}\n"
            + (extra or f"  ROOT r = {shape(out)} copy(t)\n") + "}\n")


@pytest.mark.parametrize("element,dims,perm,tile", [
    # T1 = 6 (too short for the padded tile) with A = 10 beside it: 60 columns.
    ("s16", [2, 4, 64, 10, 6], [1, 0, 4, 3, 2], "64x64xi16"),
    # A = 6 before T1 = 32: two A rows fill a tile row; T2 = 28 rows.
    ("f16", [28, 2, 6, 32], [1, 3, 2, 0], "64x64xf16"),
    # Partial tiles on both tiled dims (70 = 64 + 6 columns, 100 = 64 + 36 rows).
    ("bf16", [100, 70], [1, 0], "64x64xbf16"),
    # 8-bit: 4 elements to a bank word, a 128x128 tile; predicates as bytes.
    ("s8", [8, 64, 68], [0, 2, 1], "128x128xi8"),
    ("pred", [64, 64], [1, 0], "128x128xi8"),
])
def test_narrow_transposes_are_packed_as_xla_packs_them(element, dims, perm, tile):
    text = _transpose(element, dims, perm)
    fusion = select_fusion(hlo.parse_module(text))
    assert fusion.kind == "transpose"
    kernel = _emit(text)
    assert kernel.launch.threads == 128
    assert re.findall(r"allocate_shared : tensor<([^>]*)>", str(kernel)) == [tile]
    exe = _run(text)
    # Vector accesses on both sides: V elements per thread and access.
    loops = exe.mlir("loop-transformation")
    assert "vector.transfer_read" in loops and "vector.transfer_write" in loops


def test_a_packed_transpose_writes_side_outputs_and_epilogues():
    # Two transposes of one shape (one tile each), an epilogue through a
    # bitcast, and a side output of the input's elements in another shape.
    text = """
f {
  p = f16[2,64,64] parameter(0)
  q = bf16[2,64,64] parameter(1)
  t = f16[2,64,64] transpose(p), dimensions={0,2,1}
  u = bf16[2,64,64] transpose(q), dimensions={0,2,1}
  n = f16[2,64,64] negate(t)
  b = f16[128,64] bitcast(n)
  e = f16[8192] bitcast(p)
  s = f16[8192] exponential(e)
  ROOT r = (f16[128,64], bf16[2,64,64], f16[8192]) tuple(b, u, s)
}
"""
    kernel = _emit(text)
    assert kernel.emitter == "transpose"
    assert re.findall(r"allocate_shared : tensor<([^>]*)>", str(kernel)) == \
        ["64x64xf16", "64x64xbf16"]
    _run(text)


def test_small_narrow_transposes_xla_leaves_unpacked_go_to_the_loop_emitter():
    # 3 populated rows: fewer than the 10 vectors XLA's packed transpose
    # asks for, and too short for the padded tile.
    fusion = select_fusion(hlo.parse_module(_transpose("bf16", [3, 16, 3], [2, 1, 0])))
    assert fusion.kind == "loop"


ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def test_a_reduce_with_several_epilogues_stays_the_hero():
    text = ADD + """
f {
  p = f32[8,256] parameter(0)
  z = f32[] constant(0)
  r = f32[8] reduce(p, z), dimensions={1}, to_apply=add
  l = f32[8] log(r)
  a = f32[8] abs(r)
  ROOT t = (f32[8], f32[8]) tuple(l, a)
}
"""
    fusion = select_fusion(hlo.parse_module(text))
    assert fusion.kind == "reduction" and [h.name for h in fusion.heroes] == ["r", "r"]
    exe = _run(text)
    assert exe.mlir().count("xla_gpu.predicated_insert") >= 2


# -- reduction variants and their structure --------------------------------------

def _reduce(shape: str, out: str, dims: str, element: str = "f32") -> str:
    return ADD.replace("f32", element) + f"""
f {{
  p = {element}[{shape}] parameter(0)
  z = {element}[] constant(0)
  ROOT r = {element}[{out}] reduce(p, z), dimensions={{{dims}}}, to_apply=add
}}
"""


@pytest.mark.parametrize("shape,out,element,variant,lanes,tile", [
    # Kept minor size 8 divides a warp: the small-column emitter, 2 lanes,
    # 32 shared rows of 8 columns and one padding column.
    ("5,64,8", "5,8", "f32", "SmallColumnReductionEmitter", 2, "32x9xf32"),
    # 64 columns of f32: two side by side per thread, a 32 x 65 tile.
    ("96,64", "64", "f32", "ColumnReductionEmitter", 2, "32x65xf32"),
    # Odd column count: no vector loads, the classic 32 x 33 tile.
    ("40,33", "33", "f32", "ColumnReductionEmitter", 1, "32x33xf32"),
    # 16-bit columns, 128 of them: four per thread.
    ("64,128", "128", "s16", "ColumnReductionEmitter", 4, "32x129xi16"),
])
def test_column_reductions_tile_as_xla_does(shape, out, element, variant, lanes, tile):
    text = _reduce(shape, out, "0" if shape.count(",") == 1 else "1", element)
    emitter = emitters.emitter_for(select_fusion(hlo.parse_module(text)))
    assert type(emitter).__name__ == variant and emitter.lanes == lanes
    exe = _run(text, device=H200)
    assert f"xla_gpu.allocate_shared : tensor<{tile}>" in exe.mlir()
    assert "xla_gpu.predicated_extract" in exe.mlir()
    if lanes > 1:
        assert re.search(rf"vector.transfer_read .*vector<{lanes}x", exe.mlir("loop-transformation"))


def test_multi_row_reductions_follow_xlas_rule():
    # Rows of 4: a warp holds 8 rows (shuffle to distance 2); rows of 24
    # are not a power of two: the row emitter.
    four = select_fusion(hlo.parse_module(_reduce("1024,4", "1024", "1")))
    assert type(emitters.emitter_for(four)).__name__ == "MultiRowReductionEmitter"
    exe = _run(_reduce("1024,4", "1024", "1"), device=H200)
    assert re.search(r"shuffle_reduce\(.*\) to 2 ", exe.mlir())
    odd = select_fusion(hlo.parse_module(_reduce("64,24", "64", "1")))
    assert type(emitters.emitter_for(odd)).__name__ == "RowReductionEmitter"


# -- variadic scatter ------------------------------------------------------------

def _variadic_scatter(combiner_root: str, unique: bool, indices: str) -> str:
    """Two operands (scores and tags) updated by one scatter whose combiner
    sees both current values, then both updates."""
    return f"""
pick {{
  cur_score = f32[] parameter(0)
  cur_tag = s32[] parameter(1)
  new_score = f32[] parameter(2)
  new_tag = s32[] parameter(3)
  higher = pred[] compare(new_score, cur_score), direction=GT
  best_score = f32[] select(higher, new_score, cur_score)
  best_tag = s32[] select(higher, new_tag, cur_tag)
  one = s32[] constant(1)
  count = s32[] add(cur_tag, one)
  {combiner_root}
}}

f {{
  scores = f32[40,6] parameter(0)
  tags = s32[40,6] parameter(1)
  {indices}
  new_scores = f32[12,2,6] parameter(3)
  new_tags = s32[12,2,6] parameter(4)
  ROOT s = (f32[40,6], s32[40,6]) scatter(scores, tags, idx, new_scores, new_tags),
      update_window_dims={{1,2}}, inserted_window_dims={{}},
      scatter_dims_to_operand_dims={{0}}, index_vector_dim=1,
      unique_indices={'true' if unique else 'false'}, to_apply=pick
}}
"""


def test_a_variadic_scatter_with_unique_indices_updates_every_operand_in_parallel():
    # Index rows 0, 3, 6, ...: windows of 2 rows never overlap.
    text = _variadic_scatter("ROOT r = (f32[], s32[]) tuple(best_score, best_tag)", True,
                             "i = s32[12,1] iota(), iota_dimension=0\n"
                             "  c3 = s32[] constant(3)\n"
                             "  three = s32[12,1] broadcast(c3), dimensions={}\n"
                             "  idx = s32[12,1] multiply(i, three)\n"
                             "  unused = s32[1] parameter(2)")
    exe = _run(text)
    assert exe.spec.emitter == "scatter"
    assert exe.launch_dims["threads"] > 1
    ir_text = exe.mlir()
    assert "atomic_rmw" not in ir_text
    assert re.search(r"xla_gpu\.loop .*iter_args\(%\S+ = %\S+, %\S+ = %\S+\)", ir_text)


@pytest.mark.parametrize("root", [
    "ROOT r = (f32[], s32[]) tuple(best_score, best_tag)",   # argmax, order-free
    "ROOT r = (f32[], s32[]) tuple(new_score, count)",       # last write wins + a count
])
def test_a_variadic_scatter_with_repeated_indices_combines_in_update_order(root):
    # Random indices in [0, 38] repeat and windows overlap: one thread
    # applies every update in row-major order, as the reference does.
    text = _variadic_scatter(root, False, "idx = s32[12,1] parameter(2)")
    exe = _run(text)
    assert exe.spec.emitter == "scatter"
    assert exe.launch_dims["threads"] == 1 and exe.launch_dims["blocks"] == 1


# -- f4e2m1fn --------------------------------------------------------------------

F4_OPS = """
f {
  a = f32[8,24] parameter(0)
  b = f4e2m1fn[8,24] convert(a)
  c = f4e2m1fn[8,24] parameter(1)
  d = f4e2m1fn[8,24] multiply(b, c)
  e = f32[8,24] convert(d)
  s = s4[8,24] bitcast-convert(b)
  u = f4e2m1fn[8,24] bitcast-convert(s)
  g = pred[8,24] compare(b, c), direction=LT, type=TOTALORDER
  h = f16[8,24] convert(c)
  m = f4e2m1fn[8,24] maximum(c, u)
  k = f4e2m1fn[] constant(-1.5)
  kb = f4e2m1fn[8,24] broadcast(k), dimensions={}
  n = f4e2m1fn[8,24] add(m, kb)
  ROOT t = (f4e2m1fn[8,24], f32[8,24], s4[8,24], pred[8,24], f16[8,24], f4e2m1fn[8,24])
      tuple(b, e, s, g, h, n)
}
"""


def test_f4e2m1fn_converts_computes_and_reinterprets_as_the_interpreter():
    _run(F4_OPS)


def test_f4e2m1fn_conversion_rounds_saturates_and_maps_nan_as_ml_dtypes():
    import ml_dtypes
    text = """
f {
  a = f32[32] parameter(0)
  ROOT b = f4e2m1fn[32] convert(a)
}
"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    # Ties to even on both sides of each code, subnormal 0.5, saturation at
    # +-6 for large values and infinities, NaN -> -0, signed zeros.
    a = np.array([0, 0.25, 0.2501, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 5.01, 6, 6.99, 7, 1e30,
                  np.inf, -np.inf, np.nan, -0.0, -0.25, -0.7, -3.3, -5, -7, 1e-30,
                  -1e-30, 0.5, 1.5, 3, 4, -6, 2.25, -2.75], np.float32)
    got = np.asarray(exe.run(a)[0]).view(np.uint8)
    want = a.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert got.tolist() == want.tolist()


# -- dot inside a fusion ---------------------------------------------------------

@pytest.mark.parametrize("text", [
    # f8 matrix-vector product, f8 result (accumulated in f32, rounded once).
    """
f {
  a = f8e4m3fn[7,12] parameter(0)
  b = f8e4m3fn[12,1] parameter(1)
  ROOT d = f8e4m3fn[7,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""",
    # Batched, two contracting dims, transposed operands, an epilogue.
    """
f {
  a = f32[3,4,5,2] parameter(0)
  b = f32[3,2,6,4] parameter(1)
  d = f32[3,5,6] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},
      lhs_contracting_dims={1,3}, rhs_contracting_dims={3,1}
  ROOT e = f32[3,5,6] exponential(d)
}
""",
    # Integer and predicate dots: s8 operands widened to s32; or-of-ands.
    """
f {
  a = s8[6,9] parameter(0)
  b = s8[9,4] parameter(1)
  d = s32[6,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  p = pred[6,9] parameter(2)
  q = pred[9,4] parameter(3)
  e = pred[6,4] dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (s32[6,4], pred[6,4]) tuple(d, e)
}
""",
])
def test_small_dots_inside_a_fusion_loop_over_the_contracting_dims(text):
    exe = _run(text)
    assert exe.spec.emitter == "loop"
    assert "scf.for" in exe.mlir()


# -- reductions the reduction emitter now takes ----------------------------------

SUM = """
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""

REDUCTIONS_XLA_TAKES = {
    # Two heroes whose inputs differ in shape (one a bitcast of the other)
    # but reduce to the same columns.
    "bitcast_inputs": (SUM + """
f {
  p = f32[48,96] parameter(0)
  z = f32[] constant(0)
  a = f32[96] reduce(p, z), dimensions={0}, to_apply=sum
  n = f32[48,96] negate(p)
  b = f32[6,8,96] bitcast(n)
  c = f32[96] reduce(b, z), dimensions={0,1}, to_apply=sum
  ROOT t = (f32[96], f32[96]) tuple(a, c)
}
""", "ColumnReductionEmitter"),
    # Reduced dimensions on both sides of the kept one: [R0, K, R] rows.
    "major_and_minor": (SUM + """
f {
  p = f32[5,20,96] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[20] reduce(p, z), dimensions={0,2}, to_apply=sum
}
""", "RowReductionEmitter"),
    # A side output of another shape with as many elements as the input.
    "reshaped_side_output": (SUM + """
f {
  p = f32[16,64] parameter(0)
  e = f32[16,64] exponential(p)
  z = f32[] constant(0)
  r = f32[16] reduce(e, z), dimensions={1}, to_apply=sum
  s = f32[4,4,8,8] bitcast(e)
  ROOT t = (f32[16], f32[4,4,8,8]) tuple(r, s)
}
""", "RowReductionEmitter"),
    # A reduce that a side output (through a broadcast) and another
    # reduction's input read: those compute it again elementally.
    "reduce_read_elsewhere": (SUM + """
f {
  p = f32[8,32] parameter(0)
  z = f32[] constant(0)
  r1 = f32[8] reduce(p, z), dimensions={1}, to_apply=sum
  b = f32[8,32] broadcast(r1), dimensions={0}
  s = f32[8,32] subtract(p, b)
  r2 = f32[8] reduce(s, z), dimensions={1}, to_apply=sum
  ROOT t = (f32[8], f32[8], f32[8,32]) tuple(r1, r2, b)
}
""", "MultiRowReductionEmitter"),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS_XLA_TAKES))
def test_reductions_xla_takes_go_to_the_reduction_emitter(name):
    text, variant = REDUCTIONS_XLA_TAKES[name]
    kernel = _emit(text)
    assert kernel.emitter == "reduction" and not kernel.notes
    assert type(emitters.emitter_for(kernel.fusion)).__name__ == variant
    _run(text)


def test_each_concatenate_operand_loops_over_its_own_blocks():
    # Launched for the largest operand (4096 elements: 32 blocks of 128);
    # the small operand's loop covers its own 384 elements (3 blocks).
    text = """
f {
  a = f32[16,256] parameter(0)
  b = f32[1,256] parameter(1)
  c = f32[2,256] parameter(2)
  ROOT r = f32[19,256] concatenate(a, b, c), dimensions={0}
}
"""
    kernel = _emit(text)
    assert kernel.emitter == "concatenate" and kernel.launch.blocks == 32
    ir_text = str(kernel.module)
    for blocks in (32, 2, 4):
        assert f"bl_x in [0, {blocks - 1}]" in ir_text
    _run(text)


# -- complex element types -------------------------------------------------------

COMPLEX_ELEMENTWISE = """
f {{
  re = {part}[24] parameter(0)
  im = {part}[24] parameter(1)
  w = {c}[24] parameter(2)
  z = {c}[24] complex(re, im)
  sum = {c}[24] add(z, w)
  diff = {c}[24] subtract(sum, w)
  prod = {c}[24] multiply(diff, w)
  quot = {c}[24] divide(prod, z)
  e = {c}[24] exponential(w)
  l = {c}[24] log(w)
  s = {c}[24] sqrt(w)
  t = {c}[24] tanh(w)
  n = {c}[24] negate(e)
  g = {c}[24] sign(w)
  p = {c}[24] power(z, w)
  k = {c}[3] constant({{(1, 2), (0, -1), (3.5, 0)}})
  kb = {c}[8,3] broadcast(k), dimensions={{1}}
  kr = {c}[24] reshape(kb)
  scaled = {c}[24] multiply(quot, kr)
  a = {part}[24] abs(w)
  r = {part}[24] real(scaled)
  i = {part}[24] imag(l)
  eq = pred[24] compare(z, w), direction=NE
  pick = {c}[24] select(eq, s, t)
  back = {c}[24] convert(a)
  ROOT out = ({c}[24], {part}[24], {part}[24], {part}[24], {c}[24], {c}[24], {c}[24],
              {c}[24], {c}[24]) tuple(scaled, a, r, i, pick, back, n, g, p)
}}
"""


@pytest.mark.parametrize("c, part", [("c64", "f32"), ("c128", "f64")])
def test_complex_elementwise_ops_match_the_interpreter(c, part):
    exe = _run(COMPLEX_ELEMENTWISE.format(c=c, part=part))
    emitted = exe.mlir()
    for op in ("complex.create", "complex.add", "complex.mul", "complex.div",
               "complex.exp", "complex.log", "complex.abs", "complex.re",
               "complex.constant", "complex.neq"):
        assert op in emitted, op
    # After the lowering no complex value is left: the parts are floats.
    assert "complex<" not in exe.mlir("lowering")


def test_complex_conversions_between_widths_and_to_real_match_the_interpreter():
    text = """
f {
  x = c64[4,8] parameter(0)
  y = s32[4,8] parameter(1)
  wide = c128[4,8] convert(x)
  twice = c128[4,8] add(wide, wide)
  narrow = c64[4,8] convert(twice)
  from_int = c64[4,8] convert(y)
  mixed = c64[4,8] add(narrow, from_int)
  real_part = f32[4,8] convert(mixed)
  ROOT t = (c64[4,8], f32[4,8]) tuple(mixed, real_part)
}
"""
    _run(text)


@pytest.mark.parametrize("c, dims, reduced", [("c64", "128,64", "0"),
                                              ("c128", "16,256", "1"),
                                              ("c64", "8,300", "1")])
def test_complex_reductions_match_the_interpreter(c, dims, reduced):
    # Column and row reductions: warp shuffles move the parts of the
    # complex partial sums.
    rows, cols = (int(v) for v in dims.split(","))
    kept = cols if reduced == "0" else rows
    text = f"""
add {{
  a = {c}[] parameter(0)
  b = {c}[] parameter(1)
  ROOT s = {c}[] add(a, b)
}}

f {{
  x = {c}[{dims}] parameter(0)
  zero = {c}[] constant((0, 0))
  ROOT r = {c}[{kept}] reduce(x, zero), dimensions={{{reduced}}}, to_apply=add
}}
"""
    exe = _run(text, device=H200)
    assert exe.spec.emitter == "reduction"
    assert "xla_gpu.shuffle_reduce" in exe.mlir()


def test_complex_dynamic_update_slice_in_place_matches_the_interpreter():
    text = """
f {
  x = c64[6,5] parameter(0)
  u = c64[2,3] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT d = c64[6,5] dynamic-update-slice(x, u, i, j)
}
"""
    _run(text)


def test_complex_scatter_add_updates_both_parts_atomically():
    text = """
add {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ROOT s = c64[] add(a, b)
}

f {
  x = c64[16,4] parameter(0)
  idx = s32[10,1] parameter(1)
  upd = c64[10,4] parameter(2)
  ROOT s = c64[16,4] scatter(x, idx, upd), update_window_dims={1},
      inserted_window_dims={0}, scatter_dims_to_operand_dims={0},
      index_vector_dim=1, to_apply=add
}
"""
    exe = _run(text)
    assert exe.spec.emitter == "scatter"
    assert exe.mlir("lowering").count("llvm.atomicrmw fadd") >= 2


@pytest.mark.parametrize("c, part", [("c64", "f32"), ("c128", "f64")])
def test_complex_kernels_compile_to_ptx_that_ptxas_accepts(c, part, tmp_path):
    import subprocess

    from xla_gpu.backends.cuda import codegen
    exe = xla_gpu.compile(COMPLEX_ELEMENTWISE.format(c=c, part=part), target="cuda",
                          cache=False)
    assert ".entry" in exe.ptx
    ptxas = codegen.find_ptxas()
    if ptxas is None:
        pytest.skip("no ptxas")
    src = tmp_path / "k.ptx"
    src.write_text(exe.ptx)
    run = subprocess.run([ptxas, "-arch=sm_90", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


# -- device descriptions and vectorization ----------------------------------------

def test_the_device_description_decides_the_unroll_of_a_loop_fusion():
    # 240000 elements: fewer than an H200 runs at once (132 x 2048 threads),
    # more than an RTX A6000 does (84 x 1536, XLA's test device): unrolled
    # by 4 only for the A6000, as XLA's rule says.
    from xla_gpu.analysis.device import H200, RTX_A6000
    text = """
f {
  x = f32[20,40,300] parameter(0)
  ROOT n = f32[20,40,300] negate(x)
}
"""
    spec = select_fusion(hlo.parse_module(text), None, RTX_A6000)
    assert spec.device is RTX_A6000
    h200 = xla_gpu.compile(text, target="cpu", cache=False, device=H200)
    a6000 = xla_gpu.compile(text, target="cpu", cache=False, device=RTX_A6000)
    assert h200.launch_dims["blocks"] == 1875            # 240000 / 128
    # The cpu target's own configuration: a block per row of 300.
    host = xla_gpu.compile(text, target="cpu", cache=False)
    assert (host.launch_dims["threads"], host.launch_dims["blocks"]) == (300, 800)
    assert a6000.launch_dims["blocks"] == 469            # 240000 / (128 * 4), partial
    # The last block is partial; its bounds check is free of the vector
    # index, so the loads and stores are whole vectors.
    assert "vector<4xf32>" in a6000.mlir("loop-transformation")
    assert "vector<4xf32>" not in h200.mlir("loop-transformation")
    assert H200.max_resident_threads == 132 * 2048
    with pytest.raises(xla_gpu.errors.ArgumentError):
        xla_gpu.compile(text, target="cpu", cache=False, device="A6000")
    x = np.arange(240000, dtype=np.float32).reshape(20, 40, 300)
    np.testing.assert_array_equal(a6000.run(x)[0], -x)


def test_a_concatenate_is_unrolled_by_a_factor_of_every_operand_size():
    # One operand is a single row on the axis: no unrolling (XLA takes the
    # gcd of the loop unroll and the operands' sizes), each operand's loop
    # over its own blocks.
    from xla_gpu.analysis.device import RTX_A6000
    text = """
f {
  a = f32[16,16000] parameter(0)
  b = f32[1,16000] parameter(1)
  ROOT c = f32[17,16000] concatenate(a, b), dimensions={0}
}
"""
    spec = select_fusion(hlo.parse_module(text), None, RTX_A6000)
    kernel = emitters.emitter_for(spec).emit(ir.Context())
    emitted = str(kernel.module)
    assert kernel.launch.blocks == 2000
    assert "bl_x in [0, 1999]" in emitted and "bl_x in [0, 124]" in emitted
    assert "vector_index in [0, 0]" in emitted          # one element per thread


def test_a_grid_over_cudas_x_limit_goes_two_dimensional():
    # 24*2048*2048*3*4096 bf16 elements: 2^31 + ... blocks of 128 x 4; as
    # XLA, y = ceil(blocks / (2^31 - 1)) rows of ceil(blocks / y) blocks.
    text = """
f {
  one = bf16[] constant(1)
  ROOT b = bf16[24,2048,2048,3,4096] broadcast(one), dimensions={}
}
"""
    kernel = _emit(text)
    assert (kernel.launch.blocks, kernel.launch.blocks_y) == (1207959552, 2)
    emitted = str(kernel.module)
    assert re.search(r"gpu\.block_id\s+y \{xla\.range = \[0 : index, 1 : index\]\}", emitted)
    assert "bl_y in [0, 1]" in emitted
    exe = xla_gpu.compile(text, target="cuda", cache=False)
    assert exe.launch_dims["blocks_y"] == 2
    assert "%ctaid.y" in exe.ptx
    # The host emulates one-dimensional grids of any size: the cpu target's
    # kernel keeps x only (it could not run 2^38 threads anyway).
    host = xla_gpu.compile(text, target="cpu", cache=False)
    assert host.launch_dims == {"threads": 128, "blocks": 2415919104, "shared_bytes": 0}


def test_two_dimensional_loop_maps_cover_the_output_once():
    # The 2-D thread-to-output map is the 1-D one with block x + y * blocks;
    # a partial last row is cut at whole vectors.
    from xla_gpu.emitters.loop_config import LoopConfig, thread_to_output_map, with_unroll
    config = LoopConfig(unroll=2, threads=4, blocks=3, num_elements=44, blocks_y=2)
    with ir.Context():
        text = str(thread_to_output_map(config, [44]).to_attr())
    assert "(th_x, bl_x, bl_y)[vector_index] -> " \
        "(th_x * 2 + bl_x * 8 + bl_y * 24 + vector_index)" in text
    assert "th_x + bl_x * 4 + bl_y * 12 in [0, 21]" in text
    assert with_unroll(config, 1).blocks_y == 1


def test_complex_transposes_go_through_a_shared_tile_of_complex_elements():
    # The tile holds complex elements (structs of two parts in memory).
    text = """
f {
  x = c128[32,8,48] parameter(0)
  ROOT t = c128[48,8,32] transpose(x), dimensions={2,1,0}
}
"""
    exe = _run(text)
    assert exe.spec.emitter == "transpose"
    assert re.search(r"allocate_shared : tensor<[0-9x]+xcomplex<f64>>", exe.mlir())


# -- reduction groups -------------------------------------------------------------

def _groups(text: str) -> list[int]:
    from xla_gpu.analysis.reduction import reduction_groups
    spec = select_fusion(hlo.parse_module(text))
    return reduction_groups(spec.roots, spec.heroes)


GROUPS = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

f {
  a = f32[96,300] parameter(0)
  b = f32[96,300] parameter(1)
  zero = f32[] constant(0)
  ra = f32[96] reduce(a, zero), dimensions={1}, to_apply=add
  e = f32[96,300] exponential(b)
  rb = f32[96] reduce(e, zero), dimensions={1}, to_apply=add
  %s
}
"""


def test_disjoint_reductions_are_grouped_as_xla_groups_them():
    # Sharing only a scalar constant: disjoint (two groups).
    assert _groups(GROUPS % "ROOT t = (f32[96], f32[96]) tuple(ra, rb)") == [0, 1]
    # A side output of b's exponential joins rb's group.
    assert _groups(GROUPS % "ROOT t = (f32[96], f32[96,300], f32[96]) tuple(ra, e, rb)") \
        == [0, 1, 1]
    # Reading the same parameter: one group.
    shared = GROUPS.replace("e = f32[96,300] exponential(b)", "e = f32[96,300] exponential(a)")
    assert _groups(shared % "ROOT t = (f32[96], f32[96]) tuple(ra, rb)") == [0, 0]


@pytest.mark.parametrize("root", [
    "ROOT t = (f32[96], f32[96]) tuple(ra, rb)",
    "ROOT t = (f32[96], f32[96,300], f32[96]) tuple(ra, e, rb)",
])
def test_grouped_reductions_match_the_interpreter(root):
    exe = _run(GROUPS % root)
    assert exe.spec.emitter == "reduction"
    assert "scf.index_switch" in exe.mlir()
    # Each group has its own blocks: 96 rows per group.
    single = _emit(GROUPS.replace("e = f32[96,300] exponential(b)",
                                  "e = f32[96,300] exponential(a)")
                   % "ROOT t = (f32[96], f32[96]) tuple(ra, rb)")
    assert exe.launch_dims["blocks"] == 2 * single.launch.blocks


def test_a_column_reduction_and_an_unrelated_output_are_two_groups():
    text = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

f {
  p0 = f32[64,96] parameter(0)
  zero = f32[] constant(0)
  r = f32[96] reduce(p0, zero), dimensions={0}, to_apply=add
  p1 = f32[64,96] parameter(1)
  n = f32[64,96] negate(p1)
  ROOT t = (f32[96], f32[64,96]) tuple(r, n)
}
"""
    assert _groups(text) == [0, 1]
    exe = _run(text)
    assert "scf.index_switch" in exe.mlir()

"""The fusion analysis decides the emitter (kind "loop" with a note when the
dedicated emitter cannot take a fusion), the reduction variants, and index
maps built as AffineExprs (the same maps the text form describes)."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir as mlir_ir

import xla_gpu
from xla_gpu import emitters, hlo, ir
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.analysis.indexing import (delinearize, dim, floordiv, indexing_map,
                                       linear_expr, linearize, map_text, sym)
from xla_gpu.analysis.reduction import reduction_refusal
from xla_gpu.emitters import emitter_for
from xla_gpu.emitters.reduction import (ColumnReductionEmitter, MultiRowReductionEmitter,
                                        RowReductionEmitter)
from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def _reduce(dims, reduced) -> str:
    shape = ",".join(map(str, dims))
    out = ",".join(str(d) for i, d in enumerate(dims) if i not in reduced)
    return (f"HloModule m\n{ADD}fused {{\n  p = f32[{shape}] parameter(0)\n"
            f"  z = f32[] constant(0)\n  ROOT r = f32[{out}] reduce(p, z), "
            f"dimensions={{{','.join(map(str, reduced))}}}, to_apply=add\n}}\n")


# -- maps as AffineExprs -----------------------------------------------------

@pytest.mark.parametrize("shape", [[7], [6, 512, 4096], [2, 1, 3], [1, 1], [5, 1, 8, 3]])
def test_delinearize_and_linearize_match_their_text_form(ctx, shape):
    names = [f"d{i}" for i in range(len(shape))]
    dims = list(zip(names, shape))
    exprs = delinearize(linearize([dim(i) for i in range(len(shape))], shape), shape)
    text = map_text(dims, [], delinearize(linear_expr(names, shape), shape))
    assert str(indexing_map(dims, [], exprs)) == str(ir.IndexingMap.parse(text).simplified())


def test_thread_map_matches_its_text_form(ctx):
    # The loop emitter's map of examples/gelu.hlo, as the text it prints.
    linear = dim(1) * 512 + dim(0) * 4 + sym(0)
    m = indexing_map([("th_x", 128), ("bl_x", 24576)], [("vector_index", 4)],
                     delinearize(linear, [6, 512, 4096]))
    assert str(m) == ("(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, "
                      "(bl_x floordiv 8) mod 512, (bl_x mod 8) * 512 + th_x * 4 + "
                      "vector_index), domain: th_x in [0, 127], bl_x in [0, 24575], "
                      "vector_index in [0, 3]")


def test_constraints_on_one_variable_narrow_its_range(ctx):
    m = indexing_map([("x", 100)], [("s", 4)], [dim(0) * 4 + sym(0)],
                     [(dim(0), 10, 20), (floordiv(dim(0), 3), 0, 5)], simplify=False)
    assert str(m) == ("(x)[s] -> (x * 4 + s), domain: x in [10, 20], s in [0, 3], "
                      "x floordiv 3 in [0, 5]")


def test_a_view_reads_its_parts_lazily_and_rebuilds_when_they_change(ctx):
    attr = ir.IndexingMap.parse("(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 31], "
                                "s0 in [0, 3]").to_attr()
    view = ir.IndexingMap.from_attr(attr)
    assert "dims" not in view.__dict__ and view.to_attr() == attr
    assert view.symbols == [ir.Variable("s0", 0, 3)] and "dims" not in view.__dict__
    view.constraints.append(ir.Constraint(dim(0) * 4 + sym(0), 0, 100))
    assert str(view).endswith("d0 * 4 + s0 in [0, 100]")
    view.dims = [ir.Variable("x", 0, 7)]
    assert str(view).startswith("(x)[s0] -> (x * 4 + s0), domain: x in [0, 7]")
    assert ir.IndexingMap.from_attr(attr) == ir.IndexingMap.parse(
        "(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 31], s0 in [0, 3]")


def test_emission_parses_no_indexing_map_text(monkeypatch):
    # Every map of the transpose and reduction emitters is built, not parsed.
    calls = []
    original = mlir_ir.Attribute.parse
    monkeypatch.setattr(mlir_ir.Attribute, "parse",
                        lambda text, *a, **k: calls.append(text) or original(text, *a, **k))
    transpose = ("HloModule m\nfused {\n  p = f32[4,64,96] parameter(0)\n"
                 "  ROOT t = f32[4,96,64] transpose(p), dimensions={0,2,1}\n}\n")
    for text in (transpose, _reduce([64, 100, 40], [1]), _reduce([100, 2048], [1])):
        emitters.emit(text)
    assert not [c for c in calls if "indexing_map" in c]
    with ir.Context():   # the spy sees text that is parsed
        ir.IndexingMap.parse("(d0) -> (d0), domain: d0 in [0, 3]")
    assert [c for c in calls if "indexing_map" in c]



def test_shape_only_maps_are_built_once_per_context(monkeypatch):
    # Emitters ask for the same broadcast / bitcast maps many times: the
    # second ask of a shape pair reuses the first map (no new build and
    # simplification), hands out a view of its own, and tells layouts and
    # contexts apart.
    from xla_gpu.analysis.indexing import output_to_input
    builds = []
    original = ir.IndexingMap.simplified
    monkeypatch.setattr(ir.IndexingMap, "simplified",
                        lambda self: builds.append(1) or original(self))
    module = hlo.parse_module(
        "HloModule m\nENTRY e {\n  p = f32[4,6] parameter(0)\n"
        "  a = f32[6,4]{0,1} bitcast(p)\n  b = f32[24] bitcast(p)\n"
        "  ROOT t = (f32[6,4]{0,1}, f32[24]) tuple(a, b)\n}\n")
    by_name = {i.name: i for i in module.entry.instructions}
    with ir.Context():
        first = output_to_input(by_name["a"], 0)
        first.dims = [ir.Variable("x", 0, 5), ir.Variable("y", 0, 3)]
        again = output_to_input(by_name["a"], 0)
        assert len(builds) == 1
        assert str(again).startswith("(d0, d1) -> (d1, d0)")
        assert str(output_to_input(by_name["b"], 0)) != str(again)
        assert len(builds) == 2
    with ir.Context():
        assert str(output_to_input(by_name["a"], 0)) == str(again)
        assert len(builds) == 3

# -- the analysis decides the emitter --------------------------------------------

@pytest.mark.parametrize("dims,reduced,variant", [
    ([1024, 512], [1], RowReductionEmitter),
    ([1024, 8], [1], MultiRowReductionEmitter),
    ([100, 33], [1], RowReductionEmitter),
    ([512, 1024], [0], ColumnReductionEmitter),
    ([6, 100, 40], [1], ColumnReductionEmitter),
    ([4, 8, 16, 32], [2, 3], RowReductionEmitter),
    ([6, 10, 64], [0, 2], RowReductionEmitter),   # [R0, K, R]: XLA's row form
])
def test_reduction_variant(dims, reduced, variant):
    fusion = select_fusion(hlo.parse_module(_reduce(dims, reduced)))
    assert fusion.kind == "reduction" and not fusion.notes
    assert type(emitter_for(fusion)) is variant


# A side output that is not as large as the reduce input.
SMALL_SIDE_OUTPUT = f"""HloModule m
{ADD}fused {{
  p = f32[8,32] parameter(0)
  z = f32[] constant(0)
  r1 = f32[8] reduce(p, z), dimensions={{1}}, to_apply=add
  b = f32[8,4] broadcast(r1), dimensions={{0}}
  ROOT t = (f32[8], f32[8,4]) tuple(r1, b)
}}
"""

# XLA's concatenate emitter takes at most four operands (a loop per operand).
CONCAT_FIVE = """HloModule m
fused {
  p = f32[4,8] parameter(0)
  q = f32[4,8] parameter(1)
  c = f32[20,8] concatenate(p, q, p, q, p), dimensions={0}
  ROOT b = f32[160] bitcast(c)
}
"""

# A bitcast-convert between widths splits each concatenated element into
# pieces: the epilogue does not keep the element's position (jax's
# rng_bit_generator splits its advanced u64 state back into u32 words so).
CONCAT_SPLIT = """HloModule m
fused {
  p = u64[2] parameter(0)
  lo = u64[1] slice(p), slice={[0:1]}
  hi = u64[1] slice(p), slice={[1:2]}
  c = u64[2] concatenate(lo, hi), dimensions={0}
  ROOT b = u32[2,2] bitcast-convert(c)
}
"""

FALLBACKS = {
    "not_contiguous": (_reduce([6, 10, 8, 4], [0, 2]), "reduction",
                       "the reduced dimensions are neither contiguous"),
    "small_side_output": (SMALL_SIDE_OUTPUT, "reduction",
                          "output 'b' is neither a reduction nor as large"),
    "concatenate_operands": (CONCAT_FIVE, "concatenate",
                             "'c' has 5 operands (more than 4)"),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_the_analysis_gives_the_loop_emitter_what_the_hero_emitter_cannot_take(name):
    text, hero_kind, reason = FALLBACKS[name]
    fusion = select_fusion(hlo.parse_module(text))
    assert (fusion.kind, fusion.hero_kind) == ("loop", hero_kind)
    assert len(fusion.notes) == 1 and fusion.notes[0].startswith(
        f"{hero_kind} fusion emitted by the loop emitter") and reason in fusion.notes[0]
    kernel = emitters.emit_fusion(fusion, ir.Context())
    assert kernel.emitter == "loop" and kernel.notes == fusion.notes


def test_a_concatenate_split_by_a_bitcast_convert_is_a_loop_fusion():
    fusion = select_fusion(hlo.parse_module(CONCAT_SPLIT))
    comp = fusion.computation
    assert fusion.kind == "loop"
    state = np.array([1 | 2 << 32, 3 | 4 << 32], np.uint64)
    (got,) = xla_gpu.compile(CONCAT_SPLIT, target="cpu", cache=False).run(state)
    (want,) = hlo.evaluate(comp, state)
    np.testing.assert_array_equal(got, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(want, [[1, 2], [3, 4]])


def test_reduction_refusal_is_none_for_what_the_emitter_takes():
    fusion = select_fusion(hlo.parse_module(_reduce([64, 128], [1])))
    assert reduction_refusal(fusion.roots, fusion.heroes) is None


@pytest.mark.parametrize("name", ["small_side_output", "concatenate_operands"])
def test_fallback_fusions_compute_the_reference_values(name):
    text = FALLBACKS[name][0]
    comp = select_fusion(hlo.parse_module(text)).computation
    inputs = random_inputs(comp, seed=3)
    expected = hlo.evaluate(comp, *inputs)
    got = xla_gpu.compile(text, target="cpu", cache=False).run(*inputs)
    roots = comp.root.operands if comp.root.opcode == "tuple" else [comp.root]
    assert len(got) == len(expected) == len(roots)
    for k, (g, e, root) in enumerate(zip(got, expected, roots)):
        mismatch = compare(np.asarray(g), np.asarray(e), root.shape.element_type, k,
                           scale_relative=has_reduction(comp))
        assert mismatch is None, str(mismatch)


# -- one output of a variadic reduce -----------------------------------------

_ARGMAX = """argmax {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  nan = pred[] compare(a, a), direction=NE
  first = pred[] or(gt, nan)
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(i, j), direction=LT
  tie = pred[] and(eq, lt)
  pick = pred[] or(first, tie)
  v = f32[] select(first, a, b)
  k = s32[] select(pick, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}
"""


def _argmax_fusion(dims: list[int], reduced: int, root: str) -> str:
    """jax's argmax: a variadic (value, index) reduce whose root takes one
    or both of its outputs by get-tuple-element (`root` names them)."""
    shape = ",".join(map(str, dims))
    kept = ",".join(str(d) for i, d in enumerate(dims) if i != reduced)
    roots = {"index": f"ROOT k = s32[{kept}] get-tuple-element(r), index=1",
             "both": f"k = s32[{kept}] get-tuple-element(r), index=1\n"
                     f"  ROOT t = (s32[{kept}], f32[{kept}]) tuple(k, v)"}[root]
    return f"""HloModule m
{_ARGMAX}
fused {{
  x = f32[{shape}] parameter(0)
  io = s32[{shape}] iota(), iota_dimension={reduced}
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[{kept}], s32[{kept}]) reduce(x, io, ninf, zero), dimensions={{{reduced}}}, to_apply=argmax
  v = f32[{kept}] get-tuple-element(r), index=0
  {roots}
}}
"""


@pytest.mark.parametrize("dims,reduced", [([96, 300], 1), ([300, 96], 0)], ids=["rows", "columns"])
@pytest.mark.parametrize("root", ["index", "both"])
def test_outputs_taken_from_a_variadic_reduce_go_to_the_reduction_emitter(dims, reduced, root):
    # The root (or each tuple element) is a get-tuple-element of the reduce:
    # the reduce is the hero, the kernel writes the outputs it selects (an
    # unused one, like `v` with root "index", is not computed elsewhere).
    text = _argmax_fusion(dims, reduced, root)
    fusion = select_fusion(hlo.parse_module(text))
    assert (fusion.kind, fusion.notes) == ("reduction", [])
    assert all(h.opcode == "reduce" for h in fusion.heroes)
    comp = fusion.computation
    (x,) = random_inputs(comp, seed=5)
    x[7 % dims[0], 11] = np.nan          # NaN wins, as jnp.argmax has it
    expected = hlo.evaluate(comp, x)
    got = xla_gpu.compile(text, target="cpu", cache=False).run(x)
    assert len(got) == len(expected) == (2 if root == "both" else 1)
    for k, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e), err_msg=f"output {k}")
    np.testing.assert_array_equal(got[0], np.argmax(x, axis=reduced))


# -- size ----------------------------------------------------------------------

def test_long_chains_and_many_outputs_emit():
    ops = [f"  x{i + 1} = f32[64] {'negate' if i % 2 else 'exponential'}(x{i})"
           for i in range(3000)]
    chain = "HloModule m\nfused {\n  x0 = f32[64] parameter(0)\n" + "\n".join(ops) + \
        "\n  ROOT r = f32[64] copy(x3000)\n}\n"
    assert emitters.emit(chain).emitter == "loop"
    outs = ", ".join(f"n{i}" for i in range(500))
    body = "\n".join(f"  p{i} = f32[{8 + i % 5}] parameter({i})\n  n{i} = f32[{8 + i % 5}] "
                     f"negate(p{i})" for i in range(500))
    types = ", ".join(f"f32[{8 + i % 5}]" for i in range(500))
    kernel = emitters.emit(f"HloModule m\nfused {{\n{body}\n  ROOT t = ({types}) "
                           f"tuple({outs})\n}}\n")
    assert str(kernel.module).count("xla_gpu.loop") == 5

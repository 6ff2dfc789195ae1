"""The HLO pass infrastructure and the simplification passes
(xla_gpu.hlo.passes): each pass on small HLO, before and after, with the
values checked by the reference interpreter."""

from __future__ import annotations

import os

import numpy as np
import pytest

import xla_gpu

from xla_gpu.hlo import HloError, evaluate, module_to_text, parse_module
from xla_gpu.hlo.numerics import compare, random_inputs
from xla_gpu.hlo.passes import (AlgebraicSimplifier, BatchedGatherScatterNormalizer,
                                CallInliner, CopyInsertion, DotCanonicalization,
                                DumpOptions, HloConstantFolding, HloCSE, HloDCE, HloPass,
                                HloPassFix, HloPassPipeline, LayoutNormalization,
                                PassContext, ReductionDimensionGrouper, ReductionSplitter,
                                ShardingAnnotationRemover, TransposeFolding,
                                TreeReductionRewriter, TupleSimplifier, verify_module)


def run_pass(text: str, *passes, check: bool = True, seed: int = 0):
    """Parses `text`, runs the passes (verifying after each), checks that
    the values did not change; returns (module, result, changed)."""
    module = parse_module(text).link()
    result = module.clone()
    changed = HloPassPipeline("test", list(passes)).run(result, PassContext(verify=True))
    verify_module(result)
    assert module_to_text(parse_module(module_to_text(result))) == module_to_text(result)
    if check:
        args = random_inputs(module.entry, seed=seed)
        expected = evaluate(module, *args)
        actual = evaluate(result, *args)
        for k, (e, a) in enumerate(zip(expected, actual)):
            mismatch = compare(a, e, _etype(module, k), k, scale_relative=True)
            assert mismatch is None, str(mismatch)
    return module, result, changed


def _etype(module, k):
    return module.entry.root.shape.leaves()[k].element_type


def opcodes(module, comp=None):
    comp = comp or module.entry
    return [i.opcode for i in comp.instructions]


# ------------------------------------------------------------ infrastructure


class CountingPass(HloPass):
    """Removes one negate per run: changes the module `n` times."""
    name = "remove-one-negate"

    def run(self, module):
        for inst in module.entry.instructions:
            if inst.opcode == "negate" and inst.operands[0].opcode == "negate":
                inst.replace_all_uses_with(inst.operands[0].operands[0])
                module.entry.remove_dead()
                return True
        return False


NEGATES = """
HloModule negates
ENTRY main {
  x = f32[4] parameter(0)
  a = f32[4] negate(x)
  b = f32[4] negate(a)
  c = f32[4] negate(b)
  d = f32[4] negate(c)
  ROOT e = f32[4] add(d, x)
}
"""


def test_fixed_point_runs_until_nothing_changes_and_is_bounded():
    module = parse_module(NEGATES).link()
    fix = HloPassFix(CountingPass())
    assert fix.run(module)
    assert fix.iterations == 3  # two removals, then a run that changes nothing
    assert opcodes(module) == ["parameter", "add"]
    bounded = HloPassFix(CountingPass(), max_iterations=1)
    module = parse_module(NEGATES).link()
    bounded.run(module)
    assert opcodes(module).count("negate") == 2


def test_dumps_by_regex(tmp_path):
    module = parse_module(NEGATES).link()
    dump = DumpOptions(str(tmp_path), "negate")
    dump.write("before_optimizations.txt", module)
    pipeline = HloPassPipeline("p", [HloPassFix(CountingPass()), HloDCE()])
    pipeline.run(module, PassContext(dump))
    dump.write("after_optimizations.txt", module)
    names = sorted(os.listdir(tmp_path))
    assert names == ["01.remove-one-negate.txt", "02.remove-one-negate.txt",
                     "after_optimizations.txt", "before_optimizations.txt"]
    second = parse_module((tmp_path / "02.remove-one-negate.txt").read_text())
    assert opcodes(second) == ["parameter", "add"]
    with pytest.raises(HloError, match="dump_regex"):
        DumpOptions(None, "(")


def test_verifier_in_debug_mode_names_the_pass():
    class Breaker(HloPass):
        name = "breaker"

        def run(self, module):
            inst = module.entry.find("a")
            inst.operands.append(inst.operands[0])  # users not updated
            return True

    module = parse_module(NEGATES).link()
    with pytest.raises(HloError, match="invalid after pass 'breaker'"):
        HloPassPipeline("p", [Breaker()]).run(module, PassContext(verify=True))
    module = parse_module(NEGATES).link()
    module.entry.find("b").operands.append(module.entry.find("x"))
    with pytest.raises(HloError, match="takes 1 operand"):
        verify_module(module)


# --------------------------------------------------------------- DCE / CSE


def test_dce_keeps_side_effects_and_drops_dead_computations():
    text = """
HloModule dce
dead_callee {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}
ENTRY main {
  x = f32[4] parameter(0)
  unused = f32[4] exponential(x)
  unused_call = f32[4] map(x), dimensions={0}, to_apply=dead_callee
  token = token[] after-all()
  ROOT r = f32[4] add(x, x)
}
"""
    _, result, changed = run_pass(text, HloDCE())
    assert changed
    assert opcodes(result) == ["parameter", "after-all", "add"]
    assert [c.name for c in result.computations] == ["main"]


_EFFECT_IN_A_BRANCH = """
HloModule effects
shout {
  p = f32[] parameter(0)
  said = () custom-call(p), custom_call_target="say", custom_call_has_side_effect=true
  ROOT r = () tuple()
}
quiet {
  p = f32[] parameter(0)
  ROOT r = () tuple()
}
ENTRY main {
  x = f32[] parameter(0)
  zero = f32[] constant(0)
  positive = pred[] compare(x, zero), direction=GT
  branch = () conditional(positive, x, x), true_computation=shout, false_computation=quiet
  effect = () custom-call(x), custom_call_target="say", custom_call_has_side_effect=true
  unused = f32[] negate(x)
  t = (f32[], f32[]) tuple(x, zero)
  first = f32[] get-tuple-element(t), index=0
  ROOT r = f32[] add(first, x)
}
"""


def test_side_effects_outlive_dce_and_the_tuple_simplifier():
    """An unread side effect stays, also inside a conditional's branch (the
    conditional has its branches' side effects, as in XLA): jax.debug.print
    in a lax.cond lowers to this. The tuple simplifier's clean-up once
    dropped both."""
    for passes in ([HloDCE()], [TupleSimplifier()]):
        _, result, changed = run_pass(_EFFECT_IN_A_BRANCH, *passes, check=False)
        assert changed, passes
        kept = {i.name for c in result.computations for i in c.instructions}
        assert {"branch", "effect", "said"} <= kept, (passes, sorted(kept))
        assert "unused" not in kept


def test_cse_merges_equal_instructions_not_side_effects():
    text = """
HloModule cse
ENTRY main {
  x = f32[4] parameter(0)
  c1 = f32[] constant(2)
  c2 = f32[] constant(2)
  b1 = f32[4] broadcast(c1), dimensions={}
  b2 = f32[4] broadcast(c2), dimensions={}
  m1 = f32[4] multiply(x, b1)
  m2 = f32[4] multiply(x, b2)
  e = f32[4] exponential(m1)
  r1 = f32[4] rng(c1, c2), distribution=rng_uniform
  r2 = f32[4] rng(c1, c2), distribution=rng_uniform
  ROOT t = (f32[4], f32[4], f32[4], f32[4]) tuple(m2, e, r1, r2)
}
"""
    _, result, changed = run_pass(text, HloCSE(), check=False)
    assert changed
    ops = opcodes(result)
    assert ops.count("constant") == 1 and ops.count("multiply") == 1
    assert ops.count("rng") == 2  # side effects are never merged
    root = result.entry.root
    assert root.operands[0] is root.operands[1].operands[0]


# ------------------------------------------------------- inlining / tuples


def test_call_inliner_inlines_nested_calls():
    text = """
HloModule calls
inner {
  a = f32[4] parameter(0)
  ROOT e = f32[4] exponential(a)
}
outer {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  c = f32[4] call(p), to_apply=inner
  ROOT s = f32[4] add(c, q)
}
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  c1 = f32[4] call(x, y), to_apply=outer
  ROOT c2 = f32[4] call(c1, x), to_apply=outer
}
"""
    _, result, changed = run_pass(text, CallInliner())
    assert changed
    assert "call" not in opcodes(result)
    assert opcodes(result).count("exponential") == 2
    assert [c.name for c in result.computations] == ["main"]
    names = [i.name for i in result.entry.instructions]
    assert len(names) == len(set(names))


# An argmax whose reducer calls its comparator (jax's approx_max_k lowers
# so): the call inside the reducer is inlined too, and the program, as well
# as the fusion on its own, compiles and matches the interpreter.
_REDUCER_CALLING_A_COMPARATOR = """
HloModule argmax_with_comparator

greater {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT gt = pred[] compare(a, b), direction=GT
}

pick {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  better = pred[] call(a, b, i, j), to_apply=greater
  v = f32[] select(better, a, b)
  k = s32[] select(better, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}

ENTRY main {
  x = f32[16,40] parameter(0)
  iota = s32[40] iota(), iota_dimension=0
  idx = s32[16,40] broadcast(iota), dimensions={1}
  low = f32[] constant(-inf)
  none = s32[] constant(-1)
  ROOT r = (f32[16], s32[16]) reduce(x, idx, low, none), dimensions={1}, to_apply=pick
}
"""


def test_call_inliner_inlines_calls_in_reducers():
    _, result, changed = run_pass(_REDUCER_CALLING_A_COMPARATOR, CallInliner())
    assert changed
    assert all(i.opcode != "call" for c in result.computations for i in c.instructions)
    assert "greater" not in [c.name for c in result.computations]
    module = parse_module(_REDUCER_CALLING_A_COMPARATOR)
    x = random_inputs(module.entry, seed=3)[0]
    want = evaluate(module, x)
    exe = xla_gpu.compile(_REDUCER_CALLING_A_COMPARATOR, target="cpu", cache=False)
    for got, expected in zip(exe.run(x), want):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_a_fusion_whose_reducer_calls_a_computation_compiles():
    fused = _REDUCER_CALLING_A_COMPARATOR.replace("ENTRY main {", "fused {") + """
ENTRY e {
  x = f32[16,40] parameter(0)
  ROOT f = (f32[16], s32[16]) fusion(x), kind=kInput, calls=fused
}
"""
    module = parse_module(fused)
    x = random_inputs(module.entry, seed=4)[0]
    exe = xla_gpu.compile(fused, target="cpu", cache=False, fusion="f")
    for got, expected in zip(exe.run(x), evaluate(module, x)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_tuple_simplifier():
    text = """
HloModule tuples
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  t = (f32[4], f32[4]) tuple(x, y)
  a = f32[4] get-tuple-element(t), index=1
  p = (f32[4], f32[4]) parameter(2)
  g0 = f32[4] get-tuple-element(p), index=0
  g1 = f32[4] get-tuple-element(p), index=1
  again = (f32[4], f32[4]) tuple(g0, g1)
  swapped = (f32[4], f32[4]) tuple(g1, g0)
  ROOT r = ((f32[4], f32[4]), (f32[4], f32[4]), f32[4]) tuple(again, swapped, a)
}
"""
    _, result, changed = run_pass(text, TupleSimplifier(), check=False)
    assert changed
    root = result.entry.root
    assert root.operands[0].opcode == "parameter"      # tuple(gte 0, gte 1) -> p
    assert root.operands[1].opcode == "tuple"          # swapped: kept
    assert root.operands[2].name == "y"                # gte(tuple) -> element


# ----------------------------------------------------- algebraic simplifier


SIMPLIFIABLE = """
HloModule simplify
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[2,3] parameter(0)
  one = f32[] constant(1)
  zero = f32[] constant(0)
  ones = f32[2,3] broadcast(one), dimensions={}
  zeros = f32[2,3] broadcast(zero), dimensions={}
  m = f32[2,3] multiply(x, ones)
  a = f32[2,3] add(zeros, m)
  s = f32[2,3] subtract(a, zeros)
  d = f32[2,3] divide(s, ones)
  n = f32[2,3] negate(d)
  nn = f32[2,3] negate(n)
  r1 = f32[3,2] reshape(nn)
  r2 = f32[6] reshape(r1)
  t1 = f32[3,2] transpose(x), dimensions={1,0}
  t2 = f32[2,3] transpose(t1), dimensions={1,0}
  c1 = f64[2,3] convert(t2)
  c2 = f32[2,3] convert(c1)
  cp = f32[2,3] copy(c2)
  ninf = f32[] constant(-inf)
  ninfs = f32[2,3] broadcast(ninf), dimensions={}
  mx = f32[2,3] maximum(cp, ninfs)
  ROOT out = (f32[6], f32[2,3]) tuple(r2, mx)
}
"""


def test_algebraic_identities_collapse_to_the_parameter():
    _, result, changed = run_pass(SIMPLIFIABLE, HloPassFix(AlgebraicSimplifier()), HloDCE())
    assert changed
    assert opcodes(result) == ["parameter", "reshape", "tuple"]
    root = result.entry.root
    assert root.operands[1].opcode == "parameter"
    assert root.operands[0].operands[0].opcode == "parameter"


def test_scatter_of_no_updates_is_its_operands():
    """XLA's rewrite: a scatter with zero-element updates changes nothing
    (and no emitter has to spread zero updates over threads)."""
    text = """
HloModule empty_scatter
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] add(a, b)
}
add2 {
  a = s32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = f32[] parameter(3)
  s = s32[] add(a, c)
  t = f32[] add(b, d)
  ROOT r = (s32[], f32[]) tuple(s, t)
}
ENTRY main {
  x = s32[4] parameter(0)
  y = f32[4] parameter(1)
  i = s32[0,1] parameter(2)
  u = s32[0] parameter(3)
  v = f32[0] parameter(4)
  one = s32[4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  two = (s32[4], f32[4]) scatter(x, y, i, u, v), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add2
  t0 = s32[4] get-tuple-element(two), index=0
  t1 = f32[4] get-tuple-element(two), index=1
  ROOT out = (s32[4], s32[4], f32[4]) tuple(one, t0, t1)
}
"""
    _, result, changed = run_pass(text, HloPassFix(AlgebraicSimplifier()), TupleSimplifier(),
                                  HloDCE())
    assert changed
    assert "scatter" not in opcodes(result)
    assert [o.opcode for o in result.entry.root.operands] == ["parameter"] * 3


def test_broadcast_slice_select_compare_rewrites():
    text = """
HloModule more
ENTRY main {
  v = f32[3] parameter(0)
  i = s32[4] parameter(1)
  b = f32[3,5] broadcast(v), dimensions={0}
  bb = f32[2,3,5] broadcast(b), dimensions={1,2}
  sl = f32[2,2,5] slice(bb), slice={[0:2], [1:3], [0:5]}
  t = pred[] constant(true)
  sel = f32[2,2,5] select(t, sl, sl)
  p = pred[2,2,5] broadcast(t), dimensions={}
  z = f32[] constant(0)
  zs = f32[2,2,5] broadcast(z), dimensions={}
  sel2 = f32[2,2,5] select(p, sel, zs)
  eq = pred[4] compare(i, i), direction=EQ
  lt = pred[4] compare(i, i), direction=LT
  ss = f32[2,2,2] slice(sel2), slice={[0:2], [0:2], [1:5:2]}
  ROOT out = (f32[2,2,2], pred[4], pred[4]) tuple(ss, eq, lt)
}
"""
    _, result, _ = run_pass(text, HloPassFix(HloPassPipeline("s", [
        AlgebraicSimplifier(), HloDCE()])))
    ops = opcodes(result)
    assert "select" not in ops and "compare" not in ops
    # One broadcast of a sliced [2] vector: slice(broadcast) -> broadcast(slice).
    root = result.entry.root
    first = root.operands[0]
    assert first.opcode == "broadcast" and first.operands[0].opcode == "slice"
    assert first.operands[0].operands[0].opcode == "parameter"
    assert root.operands[1].operands[0].literal.item() is True
    assert root.operands[2].operands[0].literal.item() is False


def test_degenerate_dot_becomes_a_multiply():
    text = """
HloModule dots
ENTRY main {
  a = f32[2,4,1] parameter(0)
  b = bf16[2,1,3] parameter(1)
  ROOT d = f32[2,4,3] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
"""
    _, result, _ = run_pass(text, AlgebraicSimplifier(), HloDCE())
    assert "dot" not in opcodes(result)
    assert result.entry.root.opcode == "multiply"


def test_reduce_over_size_one_dimensions():
    text = """
HloModule r
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,1,6] parameter(0)
  zero = f32[] constant(0)
  two = f32[] constant(2)
  only = f32[4,6] reduce(x, zero), dimensions={1}, to_apply=add
  init = f32[4,6] reduce(x, two), dimensions={1}, to_apply=add
  some = f32[4] reduce(x, zero), dimensions={1,2}, to_apply=add
  ROOT t = (f32[4,6], f32[4,6], f32[4]) tuple(only, init, some)
}
"""
    _, result, _ = run_pass(text, AlgebraicSimplifier(), HloDCE())
    root = result.entry.root
    assert root.operands[0].opcode == "reshape"            # identity init
    assert root.operands[1].opcode == "add"                # init + x
    assert root.operands[2].opcode == "reduce"
    assert root.operands[2].operands[0].shape.dims == (4, 6)
    assert root.operands[2].attrs["dimensions"] == (1,)


# ------------------------------------------------------- constant folding


def test_constant_folding_small_only():
    text = """
HloModule fold
ENTRY main {
  x = f32[3] parameter(0)
  a = f32[3] constant({1, 2, 3})
  b = f32[3] constant({4, 5, 6})
  s = f32[3] add(a, b)
  e = f32[3] exponential(s)
  big = f32[] constant(1)
  bb = f32[2000] broadcast(big), dimensions={}
  n = f32[2000] negate(bb)
  sl = f32[3] slice(n), slice={[0:3]}
  m = f32[3] multiply(x, e)
  ROOT r = f32[3] add(m, sl)
}
"""
    _, result, changed = run_pass(text, HloConstantFolding(), HloDCE())
    assert changed
    ops = opcodes(result)
    assert "exponential" not in ops and "add" in ops
    assert ops.count("negate") == 1  # f32[2000]: above the folding limit
    folded = result.entry.root.operands[0].operands[1]
    np.testing.assert_allclose(folded.literal, np.exp([5, 7, 9]).astype(np.float32), rtol=1e-6)


# --------------------------------------------- gather / scatter normalizer


def test_batched_gather_and_scatter_lose_their_batching_dims():
    text = """
HloModule batched
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[8,10] parameter(0)
  labels = s32[8,1,1] parameter(1)
  g = f32[8,1] gather(x, labels), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
  zero = f32[] constant(0)
  z = f32[8,10] broadcast(zero), dimensions={}
  u = f32[8,1] parameter(2)
  s = f32[8,10] scatter(z, labels, u), update_window_dims={}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add
  ROOT t = (f32[8,1], f32[8,10]) tuple(g, s)
}
"""
    module = parse_module(text)
    labels = np.random.default_rng(0).integers(0, 10, (8, 1, 1)).astype(np.int32)
    x = np.random.default_rng(1).standard_normal((8, 10)).astype(np.float32)
    u = np.random.default_rng(2).standard_normal((8, 1)).astype(np.float32)
    expected = evaluate(module, x, labels, u)
    result = module.clone()
    assert BatchedGatherScatterNormalizer().run(result)
    verify_module(result)
    text_out = module_to_text(result)
    assert "batching_dims" not in text_out
    assert "start_index_map={1,0}" in text_out and "collapsed_slice_dims={0,1}" in text_out
    for e, a in zip(expected, evaluate(result, x, labels, u)):
        np.testing.assert_array_equal(a, e)
    np.testing.assert_array_equal(expected[0][:, 0], x[np.arange(8), labels[:, 0, 0]])


# --------------------------------------------------- layout normalization


def test_layout_normalization_makes_transposes_explicit():
    text = """
HloModule layouts, entry_computation_layout={(f32[4,8]{0,1})->f32[8,4]{1,0}}
ENTRY main {
  x = f32[4,8]{0,1} parameter(0)
  e = f32[4,8]{0,1} exponential(x)
  b = f32[8,4]{1,0} bitcast(e)
  r = f32[2,2,8]{2,1,0} reshape(x)
  s = f32[8,4]{1,0} reshape(r)
  ROOT a = f32[8,4]{1,0} add(b, s)
}
"""
    _, result, changed = run_pass(text, LayoutNormalization(), HloPassFix(AlgebraicSimplifier()),
                                  HloDCE())
    assert changed
    for inst in result.entry.instructions:
        if inst.opcode not in ("bitcast", "parameter"):
            assert inst.shape.layout in (None, tuple(range(inst.shape.rank - 1, -1, -1))), inst
    ops = opcodes(result)
    assert "reshape" not in ops and "transpose" in ops
    # The parameter keeps its layout and is read through a bitcast.
    assert result.entry.parameters[0].shape.layout == (0, 1)


def test_free_transposes_and_reshapes_become_bitcasts():
    text = """
HloModule free
ENTRY main {
  x = f32[4,1,8] parameter(0)
  t = f32[1,4,8] transpose(x), dimensions={1,0,2}
  r = f32[32] reshape(t)
  c = f32[32] copy(r)
  ROOT n = f32[32] negate(c)
}
"""
    _, result, _ = run_pass(text, LayoutNormalization(), HloDCE())
    assert opcodes(result) == ["parameter", "bitcast", "bitcast", "negate"]


# ---------------------------------------------------- dot canonicalization


@pytest.mark.parametrize("dims,shapes,expected", [
    # [b, m, k] x [b, k, n]: already canonical
    ("lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}",
     ("f32[2,3,4]", "f32[2,4,5]", "f32[2,3,5]"), ["parameter", "parameter", "dot"]),
    # k first on the lhs: a transposed operand, left to the gemm
    ("lhs_contracting_dims={0}, rhs_contracting_dims={0}",
     ("f32[4,3]", "f32[4,5]", "f32[3,5]"), ["parameter", "parameter", "dot"]),
    # two batch dims, two contracting dims, batch dims not leading
    ("lhs_batch_dims={1,0}, rhs_batch_dims={0,2}, lhs_contracting_dims={3,2}, rhs_contracting_dims={1,3}",
     ("f32[2,3,4,5]", "f32[3,5,2,4,6]", "f32[3,2,6]"), None),
    # a matrix-vector product: a size-1 n
    ("lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     ("f32[3,4]", "f32[4]", "f32[3]"), None),
])
def test_dot_canonicalization(dims, shapes, expected):
    lhs, rhs, out = shapes
    text = f"""
HloModule dot
ENTRY main {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {out} dot(a, b), {dims}
}}
"""
    _, result, changed = run_pass(text, DotCanonicalization())
    if expected is not None:
        assert opcodes(result) == expected and not changed
        return
    assert changed
    (dot,) = [i for i in result.entry.instructions if i.opcode == "dot"]
    lhs_s, rhs_s = dot.operands[0].shape, dot.operands[1].shape
    assert lhs_s.rank == rhs_s.rank == dot.shape.rank
    assert dot.shape.rank in (2, 3)
    nb = dot.shape.rank - 2
    assert dot.attrs.get("lhs_batch_dims", ()) == tuple(range(nb))
    assert len(dot.attrs["lhs_contracting_dims"]) == len(dot.attrs["rhs_contracting_dims"]) == 1


# --------------------------------------------------------- transpose folding


@pytest.mark.parametrize("operands,dims,folded", [
    # x @ x.T: one gemm of x with itself, its rhs read transposed
    (("x = f32[9,42] parameter(0)", "t = f32[42,9] transpose(x), dimensions={1,0}",
      "ROOT d = f32[9,9] dot(x, t)"),
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     {"rhs_contracting_dims": (1,)}),
    # a transposed lhs of a batched product: the batch dim stays leading
    (("x = f32[4,5,6] parameter(0)", "y = f32[4,5,7] parameter(1)",
      "t = f32[4,6,5] transpose(x), dimensions={0,2,1}", "ROOT d = f32[4,6,7] dot(t, y)"),
     "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}",
     {"lhs_contracting_dims": (1,), "lhs_batch_dims": (0,)}),
    # the batch dim would move from the front: a gemm would need it back
    (("x = f32[5,4,6] parameter(0)", "y = f32[4,6,7] parameter(1)",
      "t = f32[4,5,6] transpose(x), dimensions={1,0,2}", "ROOT d = f32[4,5,7] dot(t, y)"),
     "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}",
     None),
    # the transpose reorders the free dims (and so the result's): kept
    (("x = f32[2,3,5] parameter(0)", "y = f32[5,7] parameter(1)",
      "t = f32[3,2,5] transpose(x), dimensions={1,0,2}", "ROOT d = f32[3,2,7] dot(t, y)"),
     "lhs_contracting_dims={2}, rhs_contracting_dims={0}",
     None),
])
def test_transpose_folding(operands, dims, folded):
    body = "\n  ".join(operands)
    text = f"""
HloModule fold
ENTRY main {{
  {body}, {dims}
}}
"""
    _, result, changed = run_pass(text, TransposeFolding(), HloDCE())
    dot = result.entry.root
    assert changed == (folded is not None)
    if folded is None:
        assert any(o.opcode == "transpose" for o in dot.operands)
        return
    assert "transpose" not in opcodes(result)
    for key, value in folded.items():
        assert dot.attrs[key] == value, (key, dot.attrs)


def test_a_folded_dot_compiles_to_one_gemm_and_no_kernel():
    text = """
HloModule xxt
ENTRY main {
  x = f32[9,42] parameter(0)
  t = f32[42,9] transpose(x), dimensions={1,0}
  ROOT d = f32[9,9] dot(x, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert [t.kind for t in exe.thunks] == ["gemm"] and exe.num_kernels == 0
    x = np.random.default_rng(0).standard_normal((9, 42)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(exe.run(x)[0]), x @ x.T, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------ reduction rewrites


REDUCER = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def test_dimension_grouper_merges_adjacent_reduced_dims():
    text = "HloModule g\n" + REDUCER + """
ENTRY main {
  x = f32[4,1,5,6,3] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4,3] reduce(x, z), dimensions={1,2,3}, to_apply=add
}
"""
    _, result, _ = run_pass(text, ReductionDimensionGrouper())
    (r,) = [i for i in result.entry.instructions if i.opcode == "reduce"]
    assert r.operands[0].shape.dims == (4, 30, 3) and r.attrs["dimensions"] == (1,)


def test_splitter_splits_non_adjacent_reduced_dims():
    text = "HloModule s\n" + REDUCER + """
ENTRY main {
  x = f32[6,4,9] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(x, z), dimensions={0,2}, to_apply=add
}
"""
    _, result, _ = run_pass(text, ReductionSplitter())
    reduces = [i for i in result.entry.instructions if i.opcode == "reduce"]
    assert [r.attrs["dimensions"] for r in reduces] == [(2,), (0,)]  # largest first
    assert reduces[0].shape.dims == (6, 4)


def test_tree_reduction_rewriter_splits_long_rows():
    text = "HloModule t\n" + REDUCER + """
ENTRY main {
  x = f32[20001] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
}
"""
    _, result, _ = run_pass(text, TreeReductionRewriter())
    reduces = [i for i in result.entry.instructions if i.opcode == "reduce"]
    assert len(reduces) == 2
    first = reduces[0]
    assert first.operands[0].shape.dims == (79, 256)   # k ~ sqrt(n), padded to 20224
    assert "pad" in opcodes(result)
    assert reduces[1].operands[0].shape.dims == (79,)


def test_tree_reduction_rewriter_column_and_variadic():
    text = """
HloModule t
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lo = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lo)
  pick = pred[] or(gt, tie)
  v = f32[] select(pick, a, b)
  i = s32[] select(pick, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY main {
  x = f32[5000,3] parameter(0)
  idx = s32[5000,3] iota(), iota_dimension=0
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[3], s32[3]) reduce(x, idx, ninf, zero), dimensions={0}, to_apply=argmax
}
"""
    _, result, _ = run_pass(text, TreeReductionRewriter(), HloDCE())
    reduces = [i for i in result.entry.instructions if i.opcode == "reduce"]
    assert len(reduces) == 2 and reduces[0].operands[0].shape.dims == (40, 128, 3)


# ----------------------------------------------------------- copy insertion


def test_copy_insertion_protects_values_still_needed():
    text = """
HloModule copies
ENTRY main {
  buf = f32[8] parameter(0)
  upd = f32[2] parameter(1)
  i = s32[] parameter(2)
  e = f32[8] exponential(buf)
  d1 = f32[8] dynamic-update-slice(e, upd, i)
  n = f32[8] negate(e)
  d2 = f32[8] dynamic-update-slice(buf, upd, i)
  e2 = f32[8] exponential(upd)
  only = f32[8] broadcast(upd), dimensions={}
  ROOT t = (f32[8], f32[8], f32[8], f32[8]) tuple(d1, n, d2, buf)
}
"""
    text = text.replace("  only = f32[8] broadcast(upd), dimensions={}\n", "").replace(
        "  e2 = f32[8] exponential(upd)\n", "")
    _, result, changed = run_pass(text, CopyInsertion())
    assert changed
    d1 = result.entry.find("d1")
    d2 = result.entry.find("d2")
    assert d1.operands[0].opcode == "copy"      # e is read again by n
    assert d2.operands[0].opcode == "copy"      # an ENTRY parameter
    assert result.entry.root.operands[3].opcode == "copy"  # a parameter output


def test_copy_insertion_leaves_dead_operands_in_place():
    text = """
HloModule inplace
ENTRY main {
  buf = f32[8] parameter(0)
  upd = f32[2] parameter(1)
  i = s32[] parameter(2)
  e = f32[8] exponential(buf)
  ROOT d = f32[8] dynamic-update-slice(e, upd, i)
}
"""
    _, result, changed = run_pass(text, CopyInsertion())
    assert not changed and "copy" not in opcodes(result)


def test_copy_insertion_for_while_loops():
    text = """
HloModule loop
cond {
  s = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[4] get-tuple-element(s), index=1
  b = f32[4] get-tuple-element(s), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4], f32[4]) tuple(j, b, a)
}
ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  e = f32[4] exponential(x)
  init = (s32[], f32[4], f32[4]) tuple(zero, x, e)
  w = (s32[], f32[4], f32[4]) while(init), condition=cond, body=body
  r = f32[4] get-tuple-element(w), index=1
  ROOT out = f32[4] add(r, e)
}
"""
    _, result, changed = run_pass(text, CopyInsertion())
    assert changed
    init = result.entry.find("init")
    assert [o.opcode for o in init.operands] == ["copy", "copy", "copy"]  # const, param, e read later
    body = result.computation("body")
    assert [o.opcode for o in body.root.operands] == ["add", "copy", "copy"]  # a and b swap


def test_optimization_barrier_is_expanded():
    from xla_gpu.hlo.passes import OptimizationBarrierExpander
    text = """
HloModule barrier
ENTRY main {
  x = f32[4] parameter(0)
  e = f32[4] exponential(x)
  t = (f32[4], f32[4]) tuple(x, e)
  b = (f32[4], f32[4]) opt-barrier(t)
  g0 = f32[4] get-tuple-element(b), index=0
  g1 = f32[4] get-tuple-element(b), index=1
  e2 = f32[4] exponential(g0)
  ROOT r = f32[4] add(e2, g1)
}
"""
    _, result, changed = run_pass(text, OptimizationBarrierExpander(), TupleSimplifier(),
                                  HloCSE(), HloDCE())
    assert changed
    assert opcodes(result) == ["parameter", "exponential", "add"]  # the remat merged back


def test_transpose_of_a_dot_swaps_its_operands():
    text = """
HloModule tdot
ENTRY main {
  a = f32[2,3,4] parameter(0)
  b = f32[2,4,5] parameter(1)
  d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
  ROOT t = f32[2,5,3] transpose(d), dimensions={0,2,1}
}
"""
    _, result, _ = run_pass(text, AlgebraicSimplifier(), HloDCE())
    root = result.entry.root
    assert root.opcode == "dot" and [o.name for o in root.operands] == ["b", "a"]
    assert root.attrs["lhs_contracting_dims"] == (1,) and root.attrs["rhs_contracting_dims"] == (2,)


# ------------------------------------------------- select-and-scatter expander

_SELECT_AND_SCATTER = """
HloModule sas
pick {
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = pred[] compare(a, b), direction={direction}
}
combine {
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = {t}[] add(a, b)
}
ENTRY main {
  x = {t}[{x}] parameter(0)
  s = {t}[{s}] parameter(1)
  zero = {t}[] constant(0)
  ROOT r = {t}[{x}] select-and-scatter(x, s, zero), window={{window}}, select=pick, scatter=combine
}
"""


@pytest.mark.parametrize("t,x,s,window,direction", [
    # max-pool gradient, SAME padding: edge windows partly padding
    ("f32", "6,7", "3,4", "size=3x3 stride=2x2 pad=1_1x1_1", "GE"),
    # overlapping windows: one position chosen by several windows
    ("f32", "5,5", "4,4", "size=2x2", "GE"),
    # min-pool, integers with many ties: the first in row-major order wins
    ("s32", "2,6,4", "2,3,2", "size=1x2x2 stride=1x2x2", "LE"),
    # a window made only of padding selects nothing
    ("f32", "3,3", "3,4", "size=2x2 pad=0_1x1_2", "GT"),
])
def test_select_and_scatter_becomes_reduce_window_and_scatter(t, x, s, window, direction):
    from xla_gpu.hlo.passes import SelectAndScatterExpander
    text = (_SELECT_AND_SCATTER.replace("{t}", t).replace("{x}", x).replace("{s}", s)
            .replace("{window}", window).replace("{direction}", direction))
    module, result, changed = run_pass(text, SelectAndScatterExpander(), HloDCE())
    assert changed
    assert "select-and-scatter" not in opcodes(result)
    assert {"reduce-window", "scatter"} <= set(opcodes(result))
    if t == "s32":   # ties: values drawn from a few integers
        rng = np.random.default_rng(1)
        args = [rng.integers(-2, 3, p.shape.dims).astype(np.int32)
                for p in module.entry.parameters]
        np.testing.assert_array_equal(evaluate(result, *args)[0], evaluate(module, *args)[0])


# ------------------------------------------------------ sharding annotations

_ANNOTATED = """HloModule annotated, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["x"=1]>}}

ENTRY e {
  a = f32[4,3] parameter(0)
  b = s32[4] parameter(1)
  s = f32[4,3] custom-call(a), custom_call_target="Sharding", sharding={replicated}
  g = () custom-call(s), custom_call_target="xla.sdy.ShardingGroup", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.sharding_group_id="0"}
  local = (f32[4,3], s32[4]) custom-call(s, b), custom_call_target="xla.sdy.GlobalToLocalShape"
  x = f32[4,3] get-tuple-element(local), index=0
  y = s32[4] get-tuple-element(local), index=1
  n = f32[4,3] negate(x)
  back = f32[4,3] custom-call(n), custom_call_target="xla.sdy.LocalToGlobalShape", custom_call_has_side_effect=true
  r = f32[4,3] custom-call(back), custom_call_target="xla.sdy.FuncResultSharding", custom_call_has_side_effect=true
  ROOT t = (f32[4,3], s32[4]) tuple(r, y)
}
"""


def test_sharding_annotations_are_their_operands_on_one_device():
    """Shardy's xla.sdy.* custom calls and GSPMD's Sharding are gone before
    any other pass runs (values checked by the interpreter, which reads the
    annotations as identities)."""
    _, result, changed = run_pass(_ANNOTATED, ShardingAnnotationRemover(), TupleSimplifier(),
                                  HloDCE())
    assert changed
    assert "custom-call" not in opcodes(result)
    assert sorted(opcodes(result)) == ["negate", "parameter", "parameter", "tuple"]


def test_annotated_program_compiles_with_and_without_the_pipeline():
    import xla_gpu
    module = parse_module(_ANNOTATED)
    args = random_inputs(module.entry, seed=4)
    want = evaluate(module, *args)
    for optimize in (None, False):
        got = xla_gpu.compile(_ANNOTATED, target="cpu", cache=False, optimize=optimize).run(*args)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_a_sharding_across_devices_is_refused_naming_the_annotation():
    text = """HloModule sharded
ENTRY e {
  a = f32[8,3] parameter(0)
  ROOT l = f32[4,3] custom-call(a), custom_call_target="xla.sdy.GlobalToLocalShape"
}
"""
    module = parse_module(text)
    with pytest.raises(HloError, match="xla.sdy.GlobalToLocalShape.*more than one device"):
        ShardingAnnotationRemover().run(module)


def test_control_dep_calls_become_control_edges():
    """jax.experimental.control_deps' `control_dep(src, dst)` custom calls
    become control edges (dst after src) and are dropped, before any other
    pass; the program computes the same, and one that would close a cycle
    is refused naming the call."""
    from xla_gpu.hlo.passes.control_dep_converter import ControlDepConverter
    text = """HloModule m
ENTRY e {
  x = f32[4,4] parameter(0)
  a = f32[4,4] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[4,4] sine(a)
  b = f32[4,4] multiply(x, x)
  c = f32[4,4] cosine(b)
  cd = () custom-call(c, s), custom_call_target="control_dep", custom_call_has_side_effect=true, api_version=API_VERSION_TYPED_FFI
  ROOT r = f32[4,4] add(s, c)
}"""
    _, module, changed = run_pass(text, ControlDepConverter(), check=False)
    entry = module.entry
    assert changed and "custom-call" not in opcodes(module)
    by_name = {i.name: i for i in entry.instructions}
    assert [p.name for p in by_name["s"].control_predecessors()] == ["c"]
    x = np.arange(16, dtype=np.float32).reshape(4, 4) / 10
    got = xla_gpu.compile(text, target="cpu").run(x)[0]
    np.testing.assert_allclose(got, np.sin(x @ x) + np.cos(x * x), rtol=1e-5, atol=1e-5)
    cycle = text.replace("custom-call(c, s)", "custom-call(s, a)")
    with pytest.raises(HloError, match="control_dep from '%s' to '%a' closes a cycle"):
        ControlDepConverter().run(parse_module(cycle))

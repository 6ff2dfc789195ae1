"""Fusion (xla_gpu.hlo.passes): PriorityFusion with its cost model,
multi-output fusion, the fusion wrapper and XLA's names, on small HLO —
including what must not fuse: a reduction feeding many consumers, a merge
that would create a cycle, heroes no emitter can share, an expensive
producer recomputed per element, in-place buffers."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.analysis.fusion import analyze
from xla_gpu.hlo import evaluate, module_to_text, parse_module
from xla_gpu.hlo.numerics import compare, random_inputs
from xla_gpu.hlo.passes import (FusionWrapper, HloDCE, HloPassPipeline, PassContext,
                                PriorityFusion, fused_cost, node_cost, optimize, verify_module)
from xla_gpu.hlo.passes.cost_model import LAUNCH_OVERHEAD

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def fuse(text: str, passes=None):
    """Runs fusion passes (default: the whole optimize pipeline), checks
    values and that every fusion gets an emitter kind that accepts it."""
    module = parse_module(text).link()
    if passes is None:
        result = optimize(module, verify=True)
    else:
        result = module.clone()
        HloPassPipeline("fusion", passes).run(result, PassContext(verify=True))
        verify_module(result)
    args = random_inputs(module.entry, seed=1)
    expected, actual = evaluate(module, *args), evaluate(result, *args)
    for k, (e, a) in enumerate(zip(expected, actual)):
        etype = module.entry.root.shape.leaves()[k].element_type
        assert compare(a, e, etype, k, scale_relative=True) is None
    text_out = module_to_text(result)
    assert module_to_text(parse_module(text_out)) == text_out
    return result


def fusions(module, comp=None):
    comp = comp or module.entry
    return [i for i in comp.instructions if i.opcode == "fusion"]


def kinds(module):
    return sorted(analyze(f.attrs["calls"], f.name).kind for f in fusions(module))


def body_ops(fusion):
    return [i.opcode for i in fusion.attrs["calls"].instructions]


# ------------------------------------------------------------ basic fusion


def test_elementwise_chain_and_reduction_epilogue_fuse():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[64,128] parameter(0)
  y = f32[64,128] parameter(1)
  m = f32[64,128] multiply(x, y)
  e = f32[64,128] exponential(m)
  z = f32[] constant(0)
  r = f32[64] reduce(e, z), dimensions={1}, to_apply=add
  c = f32[] constant(128)
  cb = f32[64] broadcast(c), dimensions={}
  ROOT d = f32[64] divide(r, cb)
}
"""
    result = fuse(text)
    (f,) = fusions(result)
    assert f.attrs["kind"] == "kInput" and f.name == "input_reduce_fusion"
    assert f.attrs["calls"].name == "fused_reduce"
    assert sorted(set(body_ops(f))) == ["broadcast", "constant", "divide", "exponential",
                                        "multiply", "parameter", "reduce"]
    assert [o.name for o in f.operands] == ["x", "y"]  # constants inside
    assert analyze(f.attrs["calls"], f.name).kind == "reduction"


def test_a_reduction_is_never_recomputed_per_element():
    # softmax-like: the reduction's result is broadcast to its input's shape.
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[32,256] parameter(0)
  z = f32[] constant(0)
  r = f32[32] reduce(x, z), dimensions={1}, to_apply=add
  b = f32[32,256] broadcast(r), dimensions={0}
  s = f32[32,256] subtract(x, b)
  b2 = f32[32,256] broadcast(r), dimensions={0}
  m = f32[32,256] multiply(x, b2)
  ROOT t = (f32[32,256], f32[32,256]) tuple(s, m)
}
"""
    result = fuse(text)
    for f in fusions(result):
        ops = body_ops(f)
        if "reduce" in ops:
            # only the reduction: no broadcast of it, no elementwise after
            assert analyze(f.attrs["calls"], f.name).kind == "reduction"
            assert f.shape.dims == (32,)
    assert kinds(result) == ["loop", "reduction"]


def test_reduction_feeding_many_consumers_stays_unfused():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[32,256] parameter(0)
  z = f32[] constant(0)
  r = f32[32] reduce(x, z), dimensions={1}, to_apply=add
  n = f32[32] negate(r)
  e = f32[32] exponential(r)
  ROOT t = (f32[32], f32[32]) tuple(n, e)
}
"""
    result = fuse(text, [PriorityFusion(), FusionWrapper(), HloDCE()])
    reduce_fusions = [f for f in fusions(result) if "reduce" in body_ops(f)]
    assert len(reduce_fusions) == 1
    assert body_ops(reduce_fusions[0]).count("reduce") == 1
    assert "negate" not in body_ops(reduce_fusions[0])  # no epilogue: two users


def test_expensive_producer_is_not_recomputed_per_broadcast_element():
    chain = "\n".join(f"  v{k + 1} = f32[256] {'exponential' if k % 2 else 'tanh'}(v{k})"
                      for k in range(40))
    text = f"""HloModule f
ENTRY main {{
  v0 = f32[256] parameter(0)
  y = f32[256,8192] parameter(1)
{chain}
  b = f32[256,8192] broadcast(v40), dimensions={{0}}
  ROOT m = f32[256,8192] multiply(y, b)
}}
"""
    module = parse_module(text).link()
    result = module.clone()
    PriorityFusion().run(result)
    fs = fusions(result)
    assert len(fs) == 2  # the chain, and the broadcast-multiply reading it
    chain = next(f for f in fs if f.shape.dims == (256,))
    consumer = next(f for f in fs if f is not chain)
    transcendental = ("tanh", "exponential")
    in_chain = sum(body_ops(chain).count(op) for op in transcendental)
    recomputed = sum(body_ops(consumer).count(op) for op in transcendental)
    # Only the last few ops (each cheaper to recompute than a launch) are
    # duplicated into the 2M-element consumer; most of the chain is not.
    assert in_chain + recomputed == 40 and recomputed <= 15


def test_cheap_producer_is_duplicated_into_all_consumers():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[64,128] parameter(0)
  e = f32[64,128] exponential(x)
  z = f32[] constant(0)
  rows = f32[64] reduce(e, z), dimensions={1}, to_apply=add
  cols = f32[128] reduce(e, z), dimensions={0}, to_apply=add
  ROOT t = (f32[64], f32[128]) tuple(rows, cols)
}
"""
    result = fuse(text)
    fs = fusions(result)
    assert len(fs) == 2 and all("exponential" in body_ops(f) for f in fs)
    assert all(analyze(f.attrs["calls"], f.name).kind == "reduction" for f in fs)


# ------------------------------------------------------ multi-output fusion


def test_sibling_reductions_share_one_kernel():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[512,1024] parameter(0)
  z = f32[] constant(0)
  s = f32[512] reduce(x, z), dimensions={1}, to_apply=add
  sq = f32[512,1024] multiply(x, x)
  ss = f32[512] reduce(sq, z), dimensions={1}, to_apply=add
  ROOT t = (f32[512], f32[512]) tuple(s, ss)
}
"""
    result = fuse(text)
    (f,) = fusions(result)
    assert f.shape.is_tuple and f.attrs["calls"].root.opcode == "tuple"
    assert f.name == "input_reduce_fusion"
    assert analyze(f.attrs["calls"], f.name).kind == "reduction"


def test_producer_kept_as_an_extra_output():
    # e feeds the reduction and is an output itself.
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[64,256] parameter(0)
  e = f32[64,256] exponential(x)
  z = f32[] constant(0)
  r = f32[64] reduce(e, z), dimensions={1}, to_apply=add
  ROOT t = (f32[64,256], f32[64]) tuple(e, r)
}
"""
    result = fuse(text)
    (f,) = fusions(result)
    info = analyze(f.attrs["calls"], f.name)
    assert info.kind == "reduction" and len(info.roots) == 2


def test_no_merge_that_would_create_a_cycle():
    # p feeds c directly and through d (which c reads): fusing p into c as
    # a multi-output fusion would make c read d, which reads c.
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[64,256] parameter(0)
  p = f32[64,256] exponential(x)
  z = f32[] constant(0)
  d = f32[64] reduce(p, z), dimensions={1}, to_apply=add
  db = f32[64,256] broadcast(d), dimensions={0}
  c = f32[64,256] add(p, db)
  r = f32[64] reduce(c, z), dimensions={1}, to_apply=add
  ROOT t = (f32[64], f32[64,256]) tuple(r, p)
}
"""
    result = fuse(text)
    verify_module(result)  # acyclic, users consistent
    for f in fusions(result):
        assert analyze(f.attrs["calls"], f.name).kind in ("loop", "reduction")


def test_reduction_and_transpose_heroes_are_not_merged():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[256,512] parameter(0)
  z = f32[] constant(0)
  r = f32[256] reduce(x, z), dimensions={1}, to_apply=add
  t = f32[512,256] transpose(x), dimensions={1,0}
  cols = f32[512] reduce(x, z), dimensions={0}, to_apply=add
  ROOT out = (f32[256], f32[512,256], f32[512]) tuple(r, t, cols)
}
"""
    result = fuse(text)
    assert kinds(result) == ["reduction", "reduction", "transpose"]


# --------------------------------------------------- in-place and wrapping


def test_in_place_buffers_receive_no_producers():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  buf = f32[64,32] parameter(0)
  u = f32[4,32] parameter(1)
  i = s32[] parameter(2)
  e = f32[64,32] exponential(buf)
  un = f32[4,32] negate(u)
  zero = s32[] constant(0)
  ROOT d = f32[64,32] dynamic-update-slice(e, un, i, zero)
}
"""
    result = fuse(text)
    kinds_by_ops = {tuple(sorted(set(body_ops(f)))): analyze(f.attrs["calls"], f.name).kind
                    for f in fusions(result)}
    dus = [k for ops, k in kinds_by_ops.items() if "dynamic-update-slice" in ops]
    assert dus == ["in_place_dynamic_update_slice"]
    dus_fusion = next(f for f in fusions(result) if "dynamic-update-slice" in body_ops(f))
    assert "negate" in body_ops(dus_fusion) and "exponential" not in body_ops(dus_fusion)


def test_scatter_operand_is_not_fused_and_updates_are():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  table = f32[100,8] parameter(0)
  idx = s32[16,1] parameter(1)
  upd = f32[16,8] parameter(2)
  t2 = f32[100,8] multiply(table, table)
  u2 = f32[16,8] exponential(upd)
  ROOT s = f32[100,8] scatter(t2, idx, u2), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""
    result = fuse(text)
    scatter = next(f for f in fusions(result) if "scatter" in body_ops(f))
    assert analyze(scatter.attrs["calls"], scatter.name).kind == "scatter"
    assert "exponential" in body_ops(scatter) and "multiply" not in body_ops(scatter)


ALLOWED_IN_ENTRY = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                    "fusion", "dot", "custom-call", "while", "conditional", "sort", "copy",
                    "convolution", "topk", "rng-bit-generator", "after-all",
                    "opt-barrier", "fft", "select-and-scatter"}


def test_everything_left_is_wrapped_or_a_library_call():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  a = f32[16,32] parameter(0)
  b = f32[32,8] parameter(1)
  d = f32[16,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = f32[16,8] negate(d)
  d2 = f32[16,8] dot(n, n), lhs_contracting_dims={}, rhs_contracting_dims={}
  s = f32[16,32] add(a, a)
  ROOT t = (f32[16,8], f32[16,8], f32[16,32]) tuple(d, n, s)
}
""".replace("  d2 = f32[16,8] dot(n, n), lhs_contracting_dims={}, rhs_contracting_dims={}\n", "")
    result = fuse(text)
    ops = {i.opcode for i in result.entry.instructions}
    assert ops <= ALLOWED_IN_ENTRY
    names = sorted(f.name for f in fusions(result))
    assert names == ["wrapped_add", "wrapped_negate"]
    assert [f.attrs["calls"].name for f in fusions(result)] == \
        [f"{f.name}_computation" for f in fusions(result)]
    assert "dot" in ops


def test_scalar_constants_move_inside_and_large_ones_stay_operands():
    text = """
HloModule f
ENTRY main {
  x = f32[4] parameter(0)
  c = f32[] constant(3)
  cb = f32[4] broadcast(c), dimensions={}
  table = f32[4] constant({1, 2, 3, 4})
  m = f32[4] multiply(x, cb)
  ROOT a = f32[4] add(m, table)
}
"""
    result = fuse(text)
    (f,) = fusions(result)
    assert [o.opcode for o in f.operands] == ["parameter", "constant"]
    assert "constant" in body_ops(f)


def test_fused_names_follow_xla():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[8,16] parameter(0)
  e = f32[8,16] exponential(x)
  l = f32[8,16] log(e)
  ROOT n = f32[8,16] negate(l)
}
"""
    result = fuse(text)
    (f,) = fusions(result)
    assert f.name == "loop_negate_fusion" and f.attrs["calls"].name == "fused_negate"
    assert [p.name for p in f.attrs["calls"].parameters] == ["param_0"]


# --------------------------------------------------------------- cost model


def test_cost_model_figures():
    text = "HloModule f\n" + ADD + """
ENTRY main {
  x = f32[1024,1024] parameter(0)
  e = f32[1024,1024] exponential(x)
  z = f32[] constant(0)
  ROOT r = f32[1024] reduce(e, z), dimensions={1}, to_apply=add
}
"""
    module = parse_module(text).link()
    e = module.entry.find("e")
    r = module.entry.root
    ce, cr = node_cost(e), node_cost(r)
    mb4 = 4 * 1024 * 1024
    assert ce.bytes_read == mb4 and ce.bytes_written == mb4
    assert ce.flops == 8 * 1024 * 1024             # a transcendental: 8 flops
    assert ce.time == pytest.approx(2 * mb4 / 4.8e12 + LAUNCH_OVERHEAD)
    assert cr.utilization[0] == pytest.approx(1.0)  # each element read once
    fused = fused_cost(e, ce, r, cr)
    assert fused.bytes_read == mb4 and fused.flops == ce.flops + cr.flops
    assert fused.time < ce.time + cr.time
    # A reduction recomputed per element of a broadcast costs its whole
    # input for every output element.
    b = parse_module("HloModule g\n" + ADD + """
ENTRY main {
  x = f32[1024,1024] parameter(0)
  z = f32[] constant(0)
  r = f32[1024] reduce(x, z), dimensions={1}, to_apply=add
  ROOT b = f32[1024,1024] broadcast(r), dimensions={0}
}
""").link()
    rr, bb = b.entry.find("r"), b.entry.root
    recomputed = fused_cost(rr, node_cost(rr), bb, node_cost(bb))
    assert recomputed.flops == pytest.approx(1024 * node_cost(rr).flops)


def test_wrapped_scatter_keeps_its_constant_operand_a_parameter():
    """A small constant operand moves into a fusion body, except the operand
    a scatter writes in place: the scatter emitter writes over its
    parameter's buffer (copy insertion gives it a copy of the constant)."""
    text = """HloModule f
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] add(a, b)
}
ENTRY main {
  z = s32[1] constant({5})
  i = s32[8,1] parameter(0)
  u = s32[8] parameter(1)
  ROOT s = s32[1] scatter(z, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""
    result = fuse(text, [FusionWrapper(), HloDCE()])
    (wrapped,) = fusions(result)
    assert wrapped.operands[0].opcode == "constant"
    assert analyze(wrapped.attrs["calls"], wrapped.name).kind == "scatter"
    args = (np.zeros((8, 1), np.int32), np.arange(8, dtype=np.int32))
    got = xla_gpu.compile(text, target="cpu").run(*args)
    np.testing.assert_array_equal(got[0], evaluate(parse_module(text), *args)[0])
    np.testing.assert_array_equal(got[0], [5 + 28])

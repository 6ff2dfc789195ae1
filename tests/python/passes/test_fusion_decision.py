"""One fusion decision and one in-place rule: the HLO fusion passes take
the emitter `xla_gpu.analysis.fusion` chooses (no rules of their own), and
buffer sharing (alias analysis) writes an output over the same operand the
emitter writes it over (`xla_gpu.hlo.in_place`). Also the two meanings of
`hlo.graph.through_bitcasts`."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu.analysis.fusion import analyze, select_fusion
from xla_gpu.hlo import evaluate, parse_file, parse_module
from xla_gpu.hlo.graph import through_bitcasts
from xla_gpu.hlo.numerics import random_inputs
from xla_gpu.hlo.passes import optimize
from xla_gpu.hlo.passes.fusion_utils import body_acceptable
from xla_gpu.hlo.passes.util import program_computations
from xla_gpu.service.alias_analysis import in_place_pairs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from program_data import load_program, program_names  # noqa: E402


# ------------------------------------------------------------ through_bitcasts

CHAINS = """HloModule chains
ENTRY e {
  p = f32[20,30] parameter(0)
  flat = f32[600] bitcast(p)
  back = f32[20,30] bitcast(flat)
  bits = s32[600] bitcast(flat)
  moved = f32[30,20]{0,1} bitcast(p)
  again = f32[600] bitcast(moved)
  ROOT t = (f32[20,30], s32[600], f32[600]) tuple(back, bits, again)
}
"""


def test_through_bitcasts_finds_the_buffer_or_the_same_elements():
    comp = parse_module(CHAINS).entry
    by_name = {i.name: i for i in comp.instructions}
    p = by_name["p"]
    # Every bitcast shares its operand's bytes: the buffer is p's.
    for name in ("flat", "back", "bits", "moved", "again"):
        assert through_bitcasts(by_name[name]) is p, name
    # Reshapes between row-major shapes of one type keep the elements.
    assert through_bitcasts(by_name["back"], keep_elements=True) is p
    # A change of element type or of layout stops the walk there.
    bits = by_name["bits"]
    assert through_bitcasts(bits, keep_elements=True) is bits
    again = by_name["again"]
    assert through_bitcasts(again, keep_elements=True) is again
    assert through_bitcasts(by_name["moved"], keep_elements=True) is by_name["moved"]
    assert through_bitcasts(p, keep_elements=True) is p


# ------------------------------------------- the fusion passes and the analysis

def test_the_fusion_passes_and_the_analysis_agree_on_every_stored_program():
    kinds = set()
    for name in program_names():
        module = optimize(parse_file(load_program(name).before_path))
        for comp in program_computations(module):
            for inst in comp.instructions:
                if inst.opcode != "fusion":
                    continue
                body = inst.attrs["calls"]
                info = body_acceptable(body)
                fusion = analyze(body, inst.name, module)
                where = f"{name}: {inst.name}"
                assert (info.kind, info.hero_kind) == (fusion.kind, fusion.hero_kind), where
                assert info.ok, f"{where}: {info.reason}"
                kinds.add(fusion.kind)
                # An in-place kernel's outputs all share their operands'
                # buffers when the schedule allows: alias analysis pairs
                # every output.
                outputs = {out for _, _, out in in_place_pairs(inst)}
                if fusion.kind in ("in_place_dynamic_update_slice", "scatter"):
                    leaves = len(inst.shape.leaves())
                    expected = {(k,) for k in range(leaves)} if inst.shape.is_tuple else {()}
                    assert outputs == expected, where
    # The programs hold fusions of the emitters whose choice differed.
    assert {"loop", "reduction", "concatenate", "scatter",
            "in_place_dynamic_update_slice"} <= kinds


# ---------------------------------------------- buffer sharing and the emitter

_DUS = """
  in = f32[20,30] parameter(0)
  up = f32[5,6] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
"""

_PICK = """
pick {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = s32[] parameter(3)
  higher = pred[] compare(c, a), direction=GT
  x = f32[] select(higher, c, a)
  y = s32[] select(higher, d, b)
  ROOT r = (f32[], s32[]) tuple(x, y)
}
"""

# name: (fusion body, the operand written over by each output or {}).
IN_PLACE_CASES = {
    "update": (_DUS + """
  ROOT d = f32[20,30] dynamic-update-slice(in, up, i, j)""", {0: 0}),
    "update_reshaped": (_DUS + """
  d = f32[20,30] dynamic-update-slice(in, up, i, j)
  ROOT b = f32[600] bitcast(d)""", {0: 0}),
    # A bitcast to another element type: the kernel would write f32 values
    # into an s32 buffer (the in-place emitter produced invalid IR).
    "update_as_other_type": (_DUS + """
  d = f32[20,30] dynamic-update-slice(in, up, i, j)
  ROOT b = s32[600] bitcast(d)""", {}),
    # A bitcast to another layout: alias analysis paired it while the
    # emitter choice did not.
    "update_in_other_layout": (_DUS + """
  d = f32[20,30] dynamic-update-slice(in, up, i, j)
  ROOT b = f32[30,20]{0,1} bitcast(d)""", {}),
    "operand_in_other_layout": ("""
  in = f32[30,20]{0,1} parameter(0)
  b = f32[20,30] bitcast(in)
  up = f32[5,6] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT d = f32[20,30] dynamic-update-slice(b, up, i, j)""", {}),
    "operand_read_twice": (_DUS + """
  d = f32[20,30] dynamic-update-slice(in, up, i, j)
  n = f32[20,30] negate(in)
  ROOT t = (f32[20,30], f32[20,30]) tuple(d, n)""", {}),
    "two_updates": (_DUS + """
  in2 = f32[20,30] parameter(4)
  up2 = f32[5,6] parameter(5)
  d = f32[20,30] dynamic-update-slice(in, up, i, j)
  d2 = f32[20,30] dynamic-update-slice(in2, up2, j, i)
  ROOT t = (f32[20,30], f32[20,30]) tuple(d, d2)""", {0: 0, 1: 4}),
    # A scatter of two operands writes both over their buffers (alias
    # analysis paired neither).
    "variadic_scatter": ("""
  scores = f32[40,6] parameter(0)
  tags = s32[40,6] parameter(1)
  idx = s32[12,1] parameter(2)
  new_scores = f32[12,2,6] parameter(3)
  new_tags = s32[12,2,6] parameter(4)
  ROOT s = (f32[40,6], s32[40,6]) scatter(scores, tags, idx, new_scores, new_tags),
      update_window_dims={1,2}, inserted_window_dims={},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=pick""", {0: 0, 1: 1}),
}


def _module(body: str) -> str:
    """A module whose ENTRY runs `body` as a fusion of its parameters."""
    comp = parse_module("HloModule m\n" + _PICK + "\nf {" + body + "\n}\n")
    fused = comp.computations[-1]
    params = "\n".join(f"  a{p.parameter_number} = {p.shape} parameter({p.parameter_number})"
                       for p in fused.parameters)
    operands = ", ".join(f"a{k}" for k in range(len(fused.parameters)))
    return ("HloModule m\n" + _PICK + "\nf {" + body + "\n}\n\nENTRY e {\n" + params +
            f"\n  ROOT fusion = {fused.root.shape} fusion({operands}), kind=kLoop, calls=f\n}}\n")


@pytest.mark.parametrize("name", sorted(IN_PLACE_CASES))
def test_buffer_sharing_writes_over_the_operands_the_kernel_writes_over(name):
    body, expected = IN_PLACE_CASES[name]
    text = _module(body)
    module = parse_module(text)
    fusion = module.entry.root
    shared = {out[0] if out else 0: operand for operand, _, out in in_place_pairs(fusion)}
    assert shared == expected
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert exe.spec.aliases == expected
    if expected and name != "variadic_scatter":
        assert exe.spec.emitter == "in_place_dynamic_update_slice"
    spec = select_fusion(module)
    inputs = random_inputs(spec.computation, 0)
    if name == "variadic_scatter":
        inputs[2] = np.clip(inputs[2], 0, 38).astype(np.int32)
    got = exe.run(*[np.copy(a) for a in inputs])
    want = evaluate(spec.computation, *inputs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.ascontiguousarray(g), np.ascontiguousarray(w))


_SPLIT_ROW_REDUCTION = """
HloModule split_row
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  p = f32[4,16,{inner}] parameter(0)
  z = f32[] constant(0)
  sq = f32[4,16,{inner}] multiply(p, p)
  r1 = f32[4,16] reduce(sq, z), dimensions={{2}}, to_apply=add
  ROOT r2 = f32[4] reduce(r1, z), dimensions={{1}}, to_apply=add
}}
"""


@pytest.mark.parametrize("inner,kernels", [(1024, 2), (8, 1)])
def test_a_large_reduce_is_not_fused_into_the_reduction_that_reads_it(inner, kernels):
    # The second half of a split row reduction (DP-SGD's per-example
    # gradient norms) fused into the first would make every thread of the
    # outer reduction run the whole inner reduction: one such kernel took
    # 11 s of LLVM time. A short inner reduce is still fused (elementally).
    text = _SPLIT_ROW_REDUCTION.format(inner=inner)
    optimized = optimize(parse_module(text))
    fusions = [i for i in optimized.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == kernels
    for fusion in fusions:
        assert body_acceptable(fusion.attrs["calls"]).ok
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    x = np.random.default_rng(0).standard_normal((4, 16, inner)).astype(np.float32)
    np.testing.assert_allclose(exe.run(x)[0], evaluate(parse_module(text), x)[0], rtol=1e-5)


_ARGMAX = """
HloModule argmax
pick {
  v = f32[] parameter(0)
  i = s32[] parameter(1)
  w = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(v, w), direction=GT
  eq = pred[] compare(v, w), direction=EQ
  lt = pred[] compare(i, j), direction=LT
  first = pred[] and(eq, lt)
  take = pred[] or(gt, first)
  mv = f32[] select(take, v, w)
  mi = s32[] select(take, i, j)
  ROOT t = (f32[], s32[]) tuple(mv, mi)
}
ENTRY e {
  x = f32[9,42] parameter(0)
  iota = s32[9,42] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[9], s32[9]) reduce(x, iota, ninf, zero), dimensions={1}, to_apply=pick
  ROOT index = s32[9] get-tuple-element(r), index=1
}
"""


def test_producers_fuse_into_a_variadic_reduction():
    # jnp.argmax: a reduce of (values, iota) has a tuple shape, but it is one
    # hero (not a multi-output fusion): the iota (after the simplifier, an
    # iota of a row broadcast to the rows) is fused into it, one kernel.
    optimized = optimize(parse_module(_ARGMAX))
    fusions = [i for i in optimized.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 1
    assert {i.opcode for i in fusions[0].attrs["calls"].instructions} >= {"iota", "reduce"}
    exe = xla_gpu.compile(_ARGMAX, target="cpu", cache=False)
    assert exe.num_kernels == 1
    x = np.random.default_rng(0).standard_normal((9, 42)).astype(np.float32)
    np.testing.assert_array_equal(exe.run(x)[0], np.argmax(x, axis=1))

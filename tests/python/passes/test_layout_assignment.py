"""LayoutAssignment (xla_gpu.hlo.passes.layout_assignment): entry layouts,
XLA:GPU's dot operand rules, propagation through elementwise chains and
the copies at conflicts, on the jax programs of tests/python/data/layout
(make_layout_cases.py) and on small hand-written modules; and layout
normalization computing elementwise chains on the physical shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_gpu import hlo
from xla_gpu.errors import HloError
from xla_gpu.hlo.passes import optimize
from xla_gpu.hlo.passes.layout_assignment import (LayoutAssignment, dot_operand_layout,
                                                  entry_computation_layout)
from xla_gpu.hlo.passes.optimize import optimization_pipeline
from xla_gpu.hlo.passes.pipeline import PassContext
from xla_gpu.hlo.shape import same_shape

DATA = Path(__file__).parents[1] / "data" / "layout"

# The copies XLA:GPU's layout assignment inserts in each stored program, by
# its rules (xla/service/gpu/transforms/layout_assignment.cc): entry layouts
# are mandatory; an s8 x s8 -> s32 dot wants both operands K-minor; a
# batched dot wants a strided batch of matrices (batch not most minor); a
# plain f32 matrix takes either order; elementwise ops take their result's
# layout from their users, else their operands'.
XLA_GPU_COPIES = {
    "exp_col_in": 1,            # x {0,1} -> exp -> result {1,0}
    "exp_col_inout": 0,         # {0,1} all the way through
    "add_mixed": 1,             # tanh(x {0,1}) + y {1,0}: x's side converted
    "int8_dot_rhs_row": 1,      # s8 RHS [16,8]{1,0} -> {0,1}
    "int8_dot_rhs_col": 0,      # s8 RHS already K-minor
    "int8_dot_lhs_col": 1,      # s8 LHS [8,16]{0,1} has K major -> {1,0}
    "int8_dot_scaled": 2,       # p {0,1} to the {1,0} result; the s8 RHS
    "f32_dot_col": 0,           # a transpose flag handles {0,1}
    "batched_dot_batch_minor": 1,   # LHS with batch most minor -> default
}

# Where XLA:CPU's rules (every operand row-major, dots included) and
# XLA:GPU's give the same count, the count in XLA:CPU's own optimized
# program (the copies in <case>.cpu.hlo) must be ours as well.
SAME_ON_XLA_CPU = ("exp_col_in", "add_mixed", "batched_dot_batch_minor")


def _layout_copies(text: str) -> tuple[int, hlo.HloModule]:
    """Copies LayoutAssignment inserts when the pipeline reaches it."""
    module = hlo.parse_module(text)
    context = PassContext(verify=True)
    for hlo_pass in optimization_pipeline().passes:
        hlo_pass.run_in(module, context)
        if isinstance(hlo_pass, LayoutAssignment):
            return hlo_pass.copies, module
    raise AssertionError("no layout-assignment pass in the pipeline")


def _xla_cpu_copies(name: str) -> int:
    module = hlo.parse_module((DATA / f"{name}.cpu.hlo").read_text())
    return sum(1 for comp in module.computations for inst in comp.instructions
               if inst.opcode == "copy")


def test_every_stored_case_is_covered():
    stored = {p.name.split(".")[0] for p in DATA.glob("*.pre.hlo")}
    assert stored == set(XLA_GPU_COPIES)


@pytest.mark.parametrize("name", sorted(XLA_GPU_COPIES))
def test_copies_as_xla_gpu_inserts_them(name):
    copies, module = _layout_copies((DATA / f"{name}.pre.hlo").read_text())
    assert copies == XLA_GPU_COPIES[name]
    assert sum(1 for i in module.entry.instructions if i.opcode == "copy") == copies
    # The ENTRY now has the layouts the header gives.
    params, result = entry_computation_layout(module)
    for param, wanted in zip(module.entry.parameters, params):
        assert same_shape(param.shape, wanted)
    assert same_shape(module.entry.root.shape, result)


@pytest.mark.parametrize("name", SAME_ON_XLA_CPU)
def test_copies_as_in_xla_cpus_program(name):
    copies, _ = _layout_copies((DATA / f"{name}.pre.hlo").read_text())
    assert copies == _xla_cpu_copies(name)


def _dot(lhs: str, rhs: str, result: str, dims: str = "lhs_contracting_dims={1}, "
         "rhs_contracting_dims={0}") -> hlo.HloInstruction:
    module = hlo.parse_module(f"""
ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {result} dot(a, b), {dims}
}}""")
    return module.entry.root


def test_int8_dot_wants_both_operands_k_minor():
    dot = _dot("s8[8,16]{1,0}", "s8[16,4]{1,0}", "s32[8,4]")
    assert dot_operand_layout(dot, 0) == (1, 0)      # K (dim 1) minor already
    assert dot_operand_layout(dot, 1) == (0, 1)      # K (dim 0) made minor
    dot = _dot("s8[8,16]{0,1}", "s8[16,4]{0,1}", "s32[8,4]")
    assert dot_operand_layout(dot, 0) == (1, 0)
    assert dot_operand_layout(dot, 1) == (0, 1)
    # Not s8 x s8 -> s32: a plain matrix takes either order.
    assert dot_operand_layout(_dot("f32[8,16]{0,1}", "f32[16,4]", "f32[8,4]"), 0) is None
    assert dot_operand_layout(_dot("s8[8,16]", "s8[16,4]", "s8[8,4]"), 1) is None


def test_batched_dot_keeps_strided_batches_only():
    dims = ("lhs_batch_dims={0}, lhs_contracting_dims={2}, "
            "rhs_batch_dims={0}, rhs_contracting_dims={1}")
    # Batch most major, matrices column-major: a strided batch, kept.
    dot = _dot("f32[2,4,8]{1,2,0}", "f32[2,8,3]", "f32[2,4,3]", dims)
    assert dot_operand_layout(dot, 0) == (1, 2, 0)
    # Batch most minor: the default layout instead.
    dot = _dot("f32[2,4,8]{0,2,1}", "f32[2,8,3]", "f32[2,4,3]", dims)
    assert dot_operand_layout(dot, 0) == (2, 1, 0)


def test_conflicting_operands_get_one_copy_and_agnostic_ones_none():
    module = hlo.parse_module("""
HloModule m, entry_computation_layout={(f32[4,8]{0,1}, f32[4,8]{1,0})->f32[4,8]{0,1}}

ENTRY e {
  x = f32[4,8] parameter(0)
  y = f32[4,8] parameter(1)
  one = f32[] constant(1)
  ones = f32[4,8] broadcast(one), dimensions={}
  s = f32[4,8] add(x, ones)
  ROOT t = f32[4,8] multiply(s, y)
}""")
    la = LayoutAssignment()
    assert la.run(module)
    assert la.copies == 1
    root = module.entry.root
    assert root.shape.minor_to_major == (0, 1)
    copies = [i for i in module.entry.instructions if i.opcode == "copy"]
    assert [c.operands[0].name for c in copies] == ["y"]
    assert module.entry.find("ones").shape.minor_to_major == (0, 1)


def test_a_dot_operand_made_by_one_elementwise_op_takes_the_layout_itself():
    module = hlo.parse_module("""
ENTRY e {
  a = s8[8,16] parameter(0)
  b = s32[16,4] parameter(1)
  c = s8[16,4] convert(b)
  ROOT d = s32[8,4] dot(a, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    la = LayoutAssignment()
    la.run(module)
    convert = module.entry.find("c")
    assert convert.shape.minor_to_major == (0, 1)
    # The conversion reads b in {1,0}: the relayout happens on the way
    # (one copy, before the convert), not after it.
    assert la.copies == 1
    assert convert.operands[0].opcode == "copy"


def test_a_parameter_returned_as_it_is_needs_no_copy():
    module = hlo.parse_module("""
HloModule m, entry_computation_layout={(f32[4,8]{0,1})->(f32[4,8]{0,1}, f32[4,8]{1,0})}

ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[4,8]{1,0} exponential(x)
  ROOT t = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(x, y)
}""")
    la = LayoutAssignment()
    la.run(module)
    # x goes out in the layout it came in; exp writes the result's {1,0}
    # from x's {0,1}: one copy (XLA's count too).
    assert la.copies == 1
    root = module.entry.root
    assert root.operands[0].opcode == "parameter"
    assert [s.minor_to_major for s in root.shape.tuple_shapes] == [(0, 1), (1, 0)]


def test_bad_entry_computation_layout_is_an_error():
    module = hlo.parse_module("""
HloModule m, entry_computation_layout={(f32[4,9]{0,1})->f32[4,8]{1,0}}

ENTRY e {
  x = f32[4,8] parameter(0)
  ROOT y = f32[4,8] exponential(x)
}""")
    with pytest.raises(HloError, match="entry_computation_layout"):
        LayoutAssignment().run(module)


@pytest.mark.parametrize("header", [
    "{(f32[4,8]{0,1}+ f32[4,8])->f32[4,8]}",      # not a shape list (a fuzzer's find)
    "{(f32[4,8]{0,1})}",                           # no result
    "{(f32[4,8]{0,1}, f32[4,8])->f32[4,8]}",       # two parameters for one
])
def test_malformed_entry_computation_layout_names_the_module(header):
    module = hlo.parse_module(f"""
HloModule m, entry_computation_layout={header}

ENTRY e {{
  x = f32[4,8] parameter(0)
  ROOT y = f32[4,8] exponential(x)
}}""")
    with pytest.raises(HloError, match="module 'm'.*entry_computation_layout"):
        LayoutAssignment().run(module)


def test_elementwise_chain_on_column_major_has_no_transpose():
    text = (DATA / "exp_col_inout.pre.hlo").read_text()
    optimized = optimize(hlo.parse_module(text), verify=True)
    ops = [i.opcode for c in optimized.computations for i in c.instructions]
    assert "transpose" not in ops and "copy" not in ops
    assert optimized.entry.parameters[0].shape.minor_to_major == (0, 1)
    assert optimized.entry.root.shape.minor_to_major == (0, 1)

"""ControlFlowLayouts: where a loop, conditional or call and the computation
it calls disagree on a layout (jax's converter gives a transpose the layout
that makes it a bitcast, and that layout reaches a while's initial state
while the body declares the default one), copies convert at the boundary,
so the body reads its state in the order it was written for."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes.control_flow_layouts import ControlFlowLayouts
from xla_gpu.hlo.passes.dce import HloDCE
from xla_gpu.hlo.shape import same_shape

LOOP = """HloModule loop_layouts

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

body {
  state = (s32[], f32[3,4]{1,0}, f32[3,4]{1,0}) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  x = f32[3,4]{1,0} get-tuple-element(state), index=1
  acc = f32[3,4]{1,0} get-tuple-element(state), index=2
  one = s32[] constant(1)
  next = s32[] add(i, one)
  sum = f32[3,4]{1,0} add(acc, x)
  ROOT out = (s32[], f32[3,4]{1,0}, f32[3,4]{1,0}) tuple(next, x, sum)
}

cond {
  state = (s32[], f32[3,4]{1,0}, f32[3,4]{1,0}) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  p = f32[4,3]{1,0} parameter(0)
  t = f32[3,4]{0,1} transpose(p), dimensions={1,0}
  zero = s32[] constant(0)
  z = f32[] constant(0)
  acc = f32[3,4]{1,0} broadcast(z), dimensions={}
  init = (s32[], f32[3,4]{0,1}, f32[3,4]{1,0}) tuple(zero, t, acc)
  loop = (s32[], f32[3,4]{0,1}, f32[3,4]{1,0}) while(init), condition=cond, body=body
  ROOT r = f32[3,4]{1,0} get-tuple-element(loop), index=2
}
"""

CONDITIONAL = """HloModule branch_layouts

negate {
  x = f32[3,4]{1,0} parameter(0)
  ROOT n = f32[3,4]{1,0} negate(x)
}

twice {
  x = f32[3,4]{1,0} parameter(0)
  ROOT d = f32[3,4]{1,0} add(x, x)
}

ENTRY main {
  p = f32[4,3]{1,0} parameter(0)
  which = s32[] parameter(1)
  t = f32[3,4]{0,1} transpose(p), dimensions={1,0}
  ROOT c = f32[3,4]{1,0} conditional(which, t, t), branch_computations={negate, twice}
}
"""


def test_pass_copies_only_at_mismatched_boundaries():
    module = parse_module(LOOP)
    assert ControlFlowLayouts().run(module)
    loop = next(i for i in module.entry.instructions if i.opcode == "while")
    body = loop.attrs["body"]
    assert same_shape(loop.operands[0].shape, body.parameter(0).shape)
    assert same_shape(loop.shape, body.parameter(0).shape)
    HloDCE().run(module)   # the loop's unused element converted back goes
    copies = [i for i in module.entry.instructions if i.opcode == "copy"]
    assert len(copies) == 1 and copies[0].shape.minor_to_major == (1, 0)
    assert not ControlFlowLayouts().run(module)   # agreeing layouts: nothing to do


@pytest.mark.parametrize("optimize", [None, False])
def test_loop_state_in_another_layout_runs_correctly(optimize):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    (reference,) = evaluate(parse_module(LOOP), x)   # layouts do not matter to it
    np.testing.assert_array_equal(reference, 2 * x.T)
    (got,) = xla_gpu.compile(LOOP, target="cpu", optimize=optimize).run(x)
    np.testing.assert_array_equal(got, reference)


@pytest.mark.parametrize("which", [0, 1])
def test_conditional_operand_in_another_layout(which):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    (got,) = xla_gpu.compile(CONDITIONAL, target="cpu").run(x, np.int32(which))
    np.testing.assert_array_equal(got, -x.T if which == 0 else 2 * x.T)

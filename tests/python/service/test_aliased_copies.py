"""Must-alias donations (input_output_alias ... must-alias) whose parameter
is still read once its output could be written: copy insertion orders the
readers before the output's writer, or computes the output apart and
copies it into the parameter's buffer after them (XLA's copy insertion),
so that every such module compiles, the output is the parameter's
allocation, and the results are the reference interpreter's. May-alias
donations that cannot alias compile without aliasing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu.hlo import evaluate, module_to_text, parse_module
from xla_gpu.hlo.passes import optimize
from xla_gpu.runtime.spec import aligned_empty
from xla_gpu.service import assign_buffers, schedule_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from program_data import load_program  # noqa: E402

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

MODULES = {
    # The parameter's reduction fused with its update (one multi-output
    # kernel reads p at every element to reduce it while writing p - lr*g).
    "reduce_fused": """HloModule m, input_output_alias={ {0}: (0, {}, %KIND%) }
""" + ADD + """ENTRY e {
  p = f32[2048] parameter(0)
  g = f32[2048] parameter(1)
  lr = f32[] constant(0.01)
  l = f32[2048] broadcast(lr), dimensions={}
  s = f32[2048] multiply(g, l)
  n = f32[2048] subtract(p, s)
  z = f32[] constant(0)
  sq = f32[2048] multiply(p, p)
  r = f32[] reduce(sq, z), dimensions={0}, to_apply=add
  ROOT t = (f32[2048], f32[]) tuple(n, r)
}
""",
    # A later kernel reads both the parameter and (through a reduction)
    # the update: it cannot run before the update is written.
    "later_kernel": """HloModule m, input_output_alias={ {0}: (0, {}, %KIND%) }
""" + ADD + """ENTRY e {
  p = f32[64,64] parameter(0)
  g = f32[64,64] parameter(1)
  n = f32[64,64] subtract(p, g)
  z = f32[] constant(0)
  rn = f32[64] reduce(n, z), dimensions={1}, to_apply=add
  b = f32[64,64] broadcast(rn), dimensions={0}
  m2 = f32[64,64] multiply(p, b)
  r = f32[64] reduce(m2, z), dimensions={0}, to_apply=add
  ROOT t = (f32[64,64], f32[64]) tuple(n, r)
}
""",
    # The aliased output accumulated in a loop whose body reads p every
    # iteration (p is loop state passed through).
    "while_body_reads": """HloModule m, input_output_alias={ {0}: (0, {}, %KIND%) }
cond {
  s = (s32[], f32[128], f32[128]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(3)
  ROOT c = pred[] compare(i, k), direction=LT
}
body {
  s = (s32[], f32[128], f32[128]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[128] get-tuple-element(s), index=1
  p = f32[128] get-tuple-element(s), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x1 = f32[128] add(x, p)
  ROOT t = (s32[], f32[128], f32[128]) tuple(i1, x1, p)
}
ENTRY e {
  p = f32[128] parameter(0)
  z = f32[] constant(0)
  x0 = f32[128] broadcast(z), dimensions={}
  i0 = s32[] constant(0)
  st = (s32[], f32[128], f32[128]) tuple(i0, x0, p)
  w = (s32[], f32[128], f32[128]) while(st), condition=cond, body=body
  x = f32[128] get-tuple-element(w), index=1
  ROOT t = (f32[128]) tuple(x)
}
""",
    # The loop updates p; a reduction of the old p is another output.
    "while_update": """HloModule m, input_output_alias={ {0}: (0, {}, %KIND%) }
cond {
  s = (s32[], f32[128]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(3)
  ROOT c = pred[] compare(i, k), direction=LT
}
body {
  s = (s32[], f32[128]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[128] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  h = f32[] constant(0.5)
  hb = f32[128] broadcast(h), dimensions={}
  a1 = f32[128] multiply(a, hb)
  ROOT t = (s32[], f32[128]) tuple(i1, a1)
}
""" + ADD + """ENTRY e {
  p = f32[128] parameter(0)
  i0 = s32[] constant(0)
  st = (s32[], f32[128]) tuple(i0, p)
  w = (s32[], f32[128]) while(st), condition=cond, body=body
  n = f32[128] get-tuple-element(w), index=1
  z = f32[] constant(0)
  r = f32[] reduce(p, z), dimensions={0}, to_apply=add
  ROOT t = (f32[128], f32[]) tuple(n, r)
}
""",
    # A tuple-shaped parameter whose leaf {1} is donated.
    "tuple_leaf": """HloModule m, input_output_alias={ {0}: (0, {1}, %KIND%) }
""" + ADD + """ENTRY e {
  pt = (f32[256], f32[256]) parameter(0)
  w = f32[256] get-tuple-element(pt), index=0
  p = f32[256] get-tuple-element(pt), index=1
  n = f32[256] add(p, w)
  z = f32[] constant(0)
  r = f32[] reduce(p, z), dimensions={0}, to_apply=add
  ROOT t = (f32[256], f32[]) tuple(n, r)
}
""",
    # Two donations that read each other's parameter: one order, one copy.
    "swap": """HloModule m, input_output_alias={ {0}: (0, {}, %KIND%), {1}: (1, {}, %KIND%) }
ENTRY e {
  p = f32[64] parameter(0)
  q = f32[64] parameter(1)
  a = f32[64] negate(q)
  b = f32[64] negate(p)
  ROOT t = (f32[64], f32[64]) tuple(a, b)
}
""",
    # The donated parameter returned unchanged at its own output.
    "passthrough": """HloModule m, input_output_alias={ {0}: (0, {}, %KIND%) }
ENTRY e {
  p = f32[64] parameter(0)
  g = f32[64] parameter(1)
  s = f32[64] add(p, g)
  ROOT t = (f32[64], f32[64]) tuple(p, s)
}
""",
}


def _text(name: str, kind: str) -> str:
    return MODULES[name].replace("%KIND%", kind)


def _arguments(module, seed=0):
    rng = np.random.default_rng(seed)

    def make(shape):
        if shape.is_tuple:
            return tuple(make(s) for s in shape.tuple_shapes)
        return rng.standard_normal(shape.dims).astype(np.float32)

    return [make(p.shape) for p in module.entry.parameters]


def _aligned(values):
    raw = aligned_empty((values.nbytes + 64,), np.uint8, 64)
    out = raw[:values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


def _assignment(text):
    module = optimize(parse_module(text))
    schedule = schedule_module(module)
    return module, assign_buffers(module, schedule)


def _entry_copies(module) -> int:
    return sum(i.opcode == "copy" for i in module.entry.instructions)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_must_alias_output_is_the_parameters_allocation(name):
    # Before copy insertion served donations these were refused: "output
    # (0,) must alias parameter 0 (), but the parameter is still read
    # after the output is written".
    module, ba = _assignment(_text(name, "must-alias"))
    root = module.entry.root
    for k in range(2 if name == "swap" else 1):
        allocation = ba.allocations[ba.slice(root, (k,)).allocation]
        assert allocation.kind == "parameter" and allocation.parameter == k
        if name == "tuple_leaf":
            assert tuple(allocation.parameter_index) == (1,)
    assert len(ba.donations) == (2 if name == "swap" else 1)


@pytest.mark.parametrize("name", ["reduce_fused", "later_kernel", "while_body_reads",
                                  "while_update", "tuple_leaf", "swap", "passthrough"])
def test_must_alias_runs_in_place_with_the_interpreters_results(name):
    text = _text(name, "must-alias")
    module = parse_module(text)
    args = _arguments(module)
    want = evaluate(module, *args)
    exe = xla_gpu.compile(text, target="cpu")
    got = exe.run(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    if isinstance(args[0], tuple):
        return
    # Donated: a training loop, each step's aliased output the next input.
    p = _aligned(args[0])
    rest = args[1:]
    for _ in range(2):
        want = evaluate(module, p.copy(), *rest)
        got = exe.run(p, *rest, donated=[0])
        if name != "passthrough":
            assert got[0] is p          # written in the donated memory
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        p = got[0] if got[0] is p else _aligned(got[0])


@pytest.mark.parametrize("name", ["reduce_fused", "later_kernel", "while_update", "swap"])
def test_may_alias_that_cannot_alias_compiles_as_without_the_alias(name):
    # May-alias is dropped where it cannot hold: no copy nor edge for it,
    # the optimized module is the one without input_output_alias.
    text = _text(name, "may-alias")
    plain = text.split("\n", 1)[1]
    def body(t):
        return module_to_text(optimize(parse_module(t))).split("\n", 1)[1]
    assert body(text) == body("HloModule m\n" + plain)
    module, ba = _assignment(text)
    assert len(ba.donations) < (2 if name == "swap" else 1)
    args = _arguments(parse_module(text), 1)
    want = evaluate(parse_module(text), *args)
    for g, w in zip(xla_gpu.compile(text, target="cpu").run(*args), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_readers_that_can_run_first_are_ordered_not_copied():
    # p is read only by a reduction that nothing else needs: it runs before
    # the update (a control edge), and no copy is added.
    text = """HloModule m, input_output_alias={ {0}: (0, {}, must-alias) }
""" + ADD + """ENTRY e {
  p = f32[64,64] parameter(0)
  g = f32[64,64] parameter(1)
  z = f32[] constant(0)
  r = f32[64] reduce(p, z), dimensions={0}, to_apply=add
  n = f32[64,64] exponential(g)
  ROOT t = (f32[64,64], f32[64]) tuple(n, r)
}
"""
    module, ba = _assignment(text)
    assert _entry_copies(module) == 0
    allocation = ba.allocations[ba.slice(module.entry.root, (0,)).allocation]
    assert allocation.kind == "parameter" and allocation.parameter == 0
    writer = module.entry.root.operands[0]
    assert [i.opcode for i in writer.control_predecessors()] == ["fusion"]


def test_a_loop_that_updates_the_donated_parameter_starts_from_it():
    # Copy insertion's guard copy of p into the loop state (a parameter the
    # loop would write) is dropped: the state is p's own buffer, the other
    # reader of p runs before the loop, and nothing copies p in or out.
    module, ba = _assignment(_text("while_update", "must-alias"))
    p = module.entry.parameters[0]
    assert not [i for i in module.entry.instructions
                if i.opcode == "copy" and i.shape.dims == p.shape.dims]
    loop = next(i for i in module.entry.instructions if i.opcode == "while")
    assert loop.operands[0].operands[1] is p
    reduce_ = next(i for i in module.entry.instructions
                   if i.opcode == "fusion" and i.shape.dims == ())
    assert reduce_ in loop.operands[0].control_predecessors()
    assert ba.slice(p) == ba.slice(module.entry.root, (0,))


def test_an_elementwise_update_gets_no_copy_nor_edge():
    text = """HloModule m, input_output_alias={ {0}: (0, {}, must-alias) }
ENTRY e {
  p = f32[2048] parameter(0)
  g = f32[2048] parameter(1)
  n = f32[2048] subtract(p, g)
  ROOT t = (f32[2048], f32[2048]) tuple(n, g)
}
"""
    module, ba = _assignment(text)
    assert [i.operands[0].name for i in module.entry.instructions
            if i.opcode == "copy"] == ["g"]     # the returned parameter's own
    assert not any(i.control_predecessors() for i in module.entry.instructions)
    assert len(ba.donations) == 1


def test_a_jax_adam_step_with_every_state_array_must_aliased():
    # Each new parameter, first and second moment must alias its input:
    # the fused update reads the old moments for several outputs, so some
    # outputs are copied back, others ordered; all in the donated memory.
    prog = load_program("adam_step")
    text = (prog.folder / "before_optimizations.hlo").read_text()
    header, rest = text.split("\n", 1)
    name, attrs = header.split(",", 1)
    aliases = ", ".join(f"{{{k}}}: ({k}, {{}}, must-alias)" for k in range(9))
    exe = xla_gpu.compile(f"{name}, input_output_alias={{ {aliases} }},{attrs}\n{rest}",
                          target="cpu")
    args = [_aligned(np.asarray(a)) if np.ndim(a) else a for a in prog.inputs]
    got = exe.run(*args, donated=list(range(9)))
    for k in range(9):
        assert np.shares_memory(got[k], args[k])
    for g, w in zip(got, prog.outputs):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

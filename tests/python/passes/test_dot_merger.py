"""DotMerger: dots that read one operand on the same side become one product
over their other operands joined along the free dimension, and slices of
it; the module computes what it did."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes.dot_merger import DotMerger

RNG = np.random.default_rng(7)


def _inputs(module):
    return [RNG.standard_normal(p.shape.dims).astype(np.float32)
            for p in module.entry.parameters]


def _merged(text: str, **options):
    """(the module before, after DotMerger, whether it changed, inputs)."""
    before, after = parse_module(text), parse_module(text)
    changed = DotMerger(**options).run(after)
    return before, after, changed, _inputs(before)


def _opcodes(module) -> list[str]:
    return [i.opcode for i in module.entry.instructions]


def _same_values(before, after, args) -> None:
    for want, got in zip(evaluate(before, *args), evaluate(after, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


SHARED_LHS = """
HloModule m
ENTRY e {
  x = f32[64,32] parameter(0)
  w1 = f32[32,16] parameter(1)
  w2 = f32[32,24] parameter(2)
  a = f32[64,16] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[64,24] dot(x, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[64,16], f32[64,24]) tuple(a, b)
}
"""


def test_dots_sharing_their_lhs_become_one():
    before, after, changed, args = _merged(SHARED_LHS)
    assert changed
    ops = _opcodes(after)
    assert ops.count("dot") == 1 and ops.count("concatenate") == 1 and ops.count("slice") == 2
    (dot,) = [i for i in after.entry.instructions if i.opcode == "dot"]
    assert list(dot.shape.dims) == [64, 40]
    _same_values(before, after, args)


def test_dots_sharing_their_rhs_join_their_lhs_rows():
    text = """
HloModule m
ENTRY e {
  x1 = f32[16,32] parameter(0)
  x2 = f32[24,32] parameter(1)
  w = f32[32,8] parameter(2)
  a = f32[16,8] dot(x1, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[24,8] dot(x2, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[16,8], f32[24,8]) tuple(a, b)
}
"""
    before, after, changed, args = _merged(text)
    assert changed
    (dot,) = [i for i in after.entry.instructions if i.opcode == "dot"]
    assert list(dot.shape.dims) == [40, 8]
    _same_values(before, after, args)


def test_batched_and_transposed_operands_merge_along_the_free_dimension():
    # Batch dim 0; the other operands read as [batch, n, k] (transposed).
    text = """
HloModule m
ENTRY e {
  x = f32[4,8,16] parameter(0)
  y1 = f32[4,6,16] parameter(1)
  y2 = f32[4,10,16] parameter(2)
  a = f32[4,8,6] dot(x, y1), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}
  b = f32[4,8,10] dot(x, y2), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}
  ROOT t = (f32[4,8,6], f32[4,8,10]) tuple(a, b)
}
"""
    before, after, changed, args = _merged(text)
    assert changed
    (cat,) = [i for i in after.entry.instructions if i.opcode == "concatenate"]
    assert list(cat.shape.dims) == [4, 16, 16]
    _same_values(before, after, args)


def test_three_dots_of_one_operand_become_one():
    text = SHARED_LHS.replace(
        "  ROOT t = (f32[64,16], f32[64,24]) tuple(a, b)",
        "  w3 = f32[32,8] parameter(3)\n"
        "  c = f32[64,8] dot(x, w3), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT t = (f32[64,16], f32[64,24], f32[64,8]) tuple(a, b, c)")
    before, after, changed, args = _merged(text)
    assert changed
    dots = [i for i in after.entry.instructions if i.opcode == "dot"]
    assert len(dots) == 1 and list(dots[0].shape.dims) == [64, 48]
    _same_values(before, after, args)


def _two_dots(w1: str, w2: str, out: str, b_contracting: int = 0) -> str:
    """x = f32[8,8] times w1 and times w2 (rhs contracting dimension 0, or
    `b_contracting` for the second)."""
    return f"""
HloModule m
ENTRY e {{
  x = f32[8,8] parameter(0)
  w1 = {w1} parameter(1)
  w2 = {w2} parameter(2)
  a = {out} dot(x, w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  b = {out} dot(x, w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{{b_contracting}}}
  ROOT t = ({out}, {out}) tuple(a, b)
}}
"""


@pytest.mark.parametrize("why, text", [
    # b's other operand is computed from a: one product cannot hold both.
    ("dependent", """
HloModule m
ENTRY e {
  x = f32[8,8] parameter(0)
  w = f32[8,8] parameter(1)
  a = f32[8,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = f32[8,8] negate(a)
  b = f32[8,8] dot(x, n), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[8,8], f32[8,8]) tuple(a, b)
}
"""),
    ("other dimension numbers", _two_dots("f32[8,4]", "f32[4,8]", "f32[8,4]", b_contracting=1)),
    ("other types", _two_dots("f32[8,4]", "bf16[8,4]", "f32[8,4]")),
    ("two free dimensions", _two_dots("f32[8,2,3]", "f32[8,2,3]", "f32[8,2,3]")),
])
def test_dots_that_differ_stay_apart(why, text):
    module = parse_module(text)
    assert not DotMerger().run(module), why
    assert _opcodes(module).count("dot") == 2


def test_two_large_dots_stay_apart():
    # Each moves (64*32 + 32*16 + 64*16) * 4 = 14336 bytes or more.
    module = parse_module(SHARED_LHS)
    assert not DotMerger(max_size_to_merge=14335).run(module)
    assert DotMerger(max_size_to_merge=14336).run(parse_module(SHARED_LHS))


def test_a_program_with_merged_dots_computes_numpys_products():
    text = SHARED_LHS.replace("ROOT t = (f32[64,16], f32[64,24]) tuple(a, b)",
                              "ta = f32[64,16] tanh(a)\n"
                              "  ROOT t = (f32[64,16], f32[64,24]) tuple(ta, b)")
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert "concatenate" in exe.hlo_text
    x, w1, w2 = _inputs(parse_module(text))
    ta, b = exe.run(x, w1, w2)
    np.testing.assert_allclose(ta, np.tanh(x @ w1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b, x @ w2, rtol=1e-5, atol=1e-5)


def test_a_dot_reading_the_other_stays_apart():
    """A @ (A @ c), as an unrolled scan's carry makes it (jax's
    lax_control_flow test_scan_hoisting_consts): the two dots share their
    lhs, but the second reads the first; merged, the dot would read itself
    (a KeyError in the pass once). They stay apart; a third dot of the
    same lhs that reads neither still merges with one of them."""
    text = """
HloModule m
ENTRY e {
  a = f32[2,2] parameter(0)
  c = f32[2,1] parameter(1)
  d = f32[2,1] parameter(2)
  first = f32[2,1] dot(a, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  second = f32[2,1] dot(a, first), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  other = f32[2,1] dot(a, d), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[2,1], f32[2,1]) tuple(second, other)
}
"""
    before, after, changed, args = _merged(text)
    assert changed and _opcodes(after).count("dot") == 2
    _same_values(before, after, args)

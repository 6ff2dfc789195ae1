"""Shortcuts that keep the HLO passes linear on large programs, each held
to the general answer it replaces: GemmFusion's order of a dot's prologue
(a walk of only what reads it) and its placement of the new fusion (without
sorting the computation), PriorityFusion's test for a reduce in a producer
(read from its BodyInfo instead of its body), and the printed shapes kept
in a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_gpu.hlo import module_to_text, parse_file, parse_module
from xla_gpu.hlo import printer
from xla_gpu.hlo.passes import gemm_fusion, optimize
from xla_gpu.hlo.passes.fusion_utils import body_acceptable, is_fusible, release_trial
from xla_gpu.hlo.passes.priority_fusion import _scratch_body, single_instruction_info
from xla_gpu.hlo.shape import Shape

DATA = Path(__file__).resolve().parents[1]
GPT = DATA / "hlo_inputs" / "models" / "gpt_adamw_1layer.hlo"


@pytest.fixture(scope="module")
def gpt():
    return parse_file(str(GPT)).link()


def test_prologue_order_is_the_computations_post_order(gpt):
    comp = gpt.entry
    full = comp.post_order()
    checked = 0
    for dot in [i for i in comp.instructions if i.opcode == "dot"]:
        nodes = [i for o in dot.operands for i in gemm_fusion._plan_prologue(o, comp)]
        if not nodes:
            continue
        wanted = {id(n) for n in nodes}
        assert gemm_fusion._in_post_order(comp, nodes) == [i for i in full if id(i) in wanted]
        checked += 1
    assert checked > 5


# `d` is dead: the root does not reach its prologue, which the walk from the
# root cannot order; the order is then the full one's.
DEAD_DOT = """
HloModule dead_dot

ENTRY main {
  a = f32[8,16] parameter(0)
  b = f32[16,4] parameter(1)
  ca = f32[8,16] negate(a)
  cb = f32[16,4] negate(b)
  d = f32[8,4] dot(ca, cb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[8,16] add(a, a)
}
"""


def test_prologue_of_a_dead_dot_follows_the_full_order():
    comp = parse_module(DEAD_DOT).entry
    ca, cb = comp.find("ca"), comp.find("cb")
    assert gemm_fusion._in_post_order(comp, [cb, ca]) == \
        [i for i in comp.post_order() if i is ca or i is cb]


def test_placing_each_gemm_fusion_orders_as_the_sort_does(monkeypatch):
    placed = module_to_text(optimize(parse_file(str(GPT))))
    calls = []

    def sorted_instead(comp, fusion):   # left to `comp.instructions`
        calls.append(fusion)

    monkeypatch.setattr(gemm_fusion, "_place_fusion", sorted_instead)
    by_sort = module_to_text(optimize(parse_file(str(GPT))))
    assert len(calls) > 3
    assert placed == by_sort


def test_an_accepted_body_of_another_kind_than_reduction_has_no_reduce(gpt):
    """What PriorityFusion.can_fuse reads instead of scanning a producer
    for a reduce."""
    comp = gpt.entry
    seen = 0
    for inst in comp.instructions:
        if not is_fusible(inst) or inst.shape.is_tuple or inst.opcode == "constant":
            continue
        info = single_instruction_info(inst)
        if info.ok and info.kind != "reduction":
            assert inst.opcode != "reduce"
        for user in inst.users:
            if not is_fusible(user) or user.shape.is_tuple:
                continue
            body = _scratch_body(user, inst)
            info = body_acceptable(body)
            if info.ok and info.kind != "reduction":
                assert not any(i.opcode == "reduce" for i in body.instructions)
            seen += any(i.opcode == "reduce" for i in body.instructions)
            release_trial(body)
    assert seen > 0


def test_shape_texts_from_the_table_are_the_printed_ones(gpt):
    shapes = {i.shape for c in gpt.computations for i in c.instructions}
    assert len(shapes) > 20
    for shape in shapes:
        for layout in (True, False):
            assert printer.shape_to_text(shape, layout) == printer._shape_text(shape, layout)
            assert printer.shape_to_text(shape, layout) == printer._shape_text(shape, layout)
    # Equal shapes, one without a layout: texts of their own.
    assert printer.shape_to_text(Shape("f32", (4, 2), (0, 1))) == "f32[4,2]{0,1}"
    assert printer.shape_to_text(Shape("f32", (4, 2))) == "f32[4,2]{1,0}"
    # A shape that cannot be hashed is printed without the table.
    assert printer.shape_to_text(Shape("f32", [4, 2])) == "f32[4,2]{1,0}"

"""TupleSimplifier: get-tuple-element(tuple(a0, a1, ...), i) -> ai, and
tuple(gte(t, 0), ..., gte(t, n-1)) -> t when t has exactly those n
elements."""

from __future__ import annotations

from ..module import HloModule
from .pipeline import HloPass
from .util import has_side_effect, program_computations, program_instructions, same_shape

__all__ = ["TupleSimplifier"]


class TupleSimplifier(HloPass):
    name = "tuple-simplifier"

    def run(self, module: HloModule) -> bool:
        changed = False
        for _, inst in program_instructions(module):
            if inst.opcode == "get-tuple-element":
                src = inst.operands[0]
                if src.opcode == "tuple":
                    element = src.operands[inst.attrs["index"]]
                    if same_shape(element.shape, inst.shape, layouts=False):
                        inst.replace_all_uses_with(element)
                        changed = True
            elif inst.opcode == "tuple" and inst.operands:
                first = inst.operands[0]
                if first.opcode != "get-tuple-element":
                    continue
                source = first.operands[0]
                if not source.shape.is_tuple or \
                        len(source.shape.tuple_shapes) != len(inst.operands):
                    continue
                if all(o.opcode == "get-tuple-element" and o.operands[0] is source
                       and o.attrs["index"] == k for k, o in enumerate(inst.operands)) \
                        and same_shape(source.shape, inst.shape):
                    inst.replace_all_uses_with(source)
                    changed = True
        if changed:
            for comp in program_computations(module):
                comp.remove_dead(has_side_effect)
        return changed

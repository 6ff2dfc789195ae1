"""ControlFlowLayouts: a value passed into or out of a called computation
has the layout the computation declares.

The layouts in a module jax hands over are not all constraints: jax's
converter gives a transpose the layout that makes it a bitcast, and that
layout flows into the tuple a while loop starts from, while the loop body's
parameter keeps the default one. XLA's layout assignment reconciles them
(the computation's layout wins; copies convert at the boundary). xla_gpu
reads every layout as the physical one, so a mismatch at a boundary would
make the body read the buffer in the wrong order. This pass adds those
copies, before anything else looks at layouts:

  while        operand -> body/condition parameter layout; body root ->
               that layout; the while's own shape is set to it and its
               users get a copy back to the layout they were written for
  conditional  each branch operand -> the branch's parameter layout; each
               branch root -> the conditional's layout
  call         operands -> the callee's parameter layouts; the callee's
               root -> the call's layout

A copy is added only where the layouts differ (a module whose layouts
agree is left alone). Tuples are rebuilt element by element, so only the
leaves that differ are copied.
"""

from __future__ import annotations

from ..module import HloComputation, HloInstruction, HloModule
from ..shape import Shape, same_shape
from .pipeline import HloPass

__all__ = ["ControlFlowLayouts", "convert_layout"]


def convert_layout(comp: HloComputation, value: HloInstruction,
                   target: Shape) -> HloInstruction:
    """`value` with `target`'s layouts (same dims and types): itself where
    they agree, else copies of the leaves that differ (tuples rebuilt)."""
    shape = value.shape
    if same_shape(shape, target):
        return value
    if not same_shape(shape, target, layouts=False):
        raise value.error(f"cannot give {shape} the layout of {target}: the shapes differ")
    if not shape.is_tuple:
        return comp.add("copy", target, [value], name=f"{value.name}.relayout")
    elements = []
    for index, element_shape in enumerate(target.tuple_shapes):
        if value.opcode == "tuple":   # its element, not a read of it
            element = value.operands[index]
        else:
            element = comp.add("get-tuple-element", shape.tuple_shapes[index], [value],
                               name=f"{value.name}.element", index=index)
        elements.append(convert_layout(comp, element, element_shape))
    return comp.add("tuple", target, elements, name=f"{value.name}.relayout")


def _convert_root(comp: HloComputation, target: Shape) -> bool:
    root = comp.root
    converted = convert_layout(comp, root, target)
    if converted is root:
        return False
    comp.set_root(converted)
    return True


def _convert_operand(inst: HloInstruction, index: int, target: Shape) -> bool:
    operand = inst.operands[index]
    converted = convert_layout(inst.parent, operand, target)
    if converted is operand:
        return False
    inst.replace_operand_with(index, converted)
    return True


def _give_users_their_layout(inst: HloInstruction, declared: Shape) -> None:
    """`inst`'s shape changed layouts; its users were written for
    `declared`. An element read (get-tuple-element) takes the new layout and
    passes the question on, so only elements someone reads get a copy;
    other users (and the root) read a converted copy of the whole value."""
    comp = inst.parent
    back = None
    for user in list(inst.users):
        if user.opcode == "get-tuple-element" and inst.shape.is_tuple:
            element = inst.shape.tuple_shapes[user.attrs["index"]]
            if not same_shape(user.shape, element):
                old, user.shape = user.shape, element
                _give_users_their_layout(user, old)
            continue
        if back is None:
            back = convert_layout(comp, inst, declared)
        user.replace_uses_of(inst, back)
    if comp.root is inst:
        comp.set_root(back if back is not None else convert_layout(comp, inst, declared))


class ControlFlowLayouts(HloPass):
    name = "control-flow-layouts"

    def run(self, module: HloModule) -> bool:
        changed = False
        for comp in list(module.computations):
            for inst in list(comp.instructions):
                if inst.opcode == "while":
                    changed |= self._while(inst)
                elif inst.opcode == "conditional":
                    changed |= self._conditional(inst)
                elif inst.opcode == "call":
                    changed |= self._call(inst)
        return changed

    def _while(self, loop: HloInstruction) -> bool:
        body, condition = loop.attrs["body"], loop.attrs["condition"]
        state = body.parameter(0).shape
        if not same_shape(condition.parameter(0).shape, state):
            raise loop.error(f"its condition's parameter {condition.parameter(0).shape} and "
                             f"its body's {state} have different layouts")
        changed = _convert_root(body, state)
        changed |= _convert_operand(loop, 0, state)
        if not same_shape(loop.shape, state):
            declared = loop.shape
            loop.shape = state
            _give_users_their_layout(loop, declared)
            changed = True
        return changed

    def _conditional(self, cond: HloInstruction) -> bool:
        if "branch_computations" in cond.attrs:
            branches = list(cond.attrs["branch_computations"])
        else:   # a predicate: operand 1 goes to the true branch
            branches = [cond.attrs["true_computation"], cond.attrs["false_computation"]]
        changed = False
        for index, branch in enumerate(branches):
            changed |= _convert_operand(cond, index + 1, branch.parameter(0).shape)
            changed |= _convert_root(branch, cond.shape)
        return changed

    def _call(self, call: HloInstruction) -> bool:
        callee = call.attrs["to_apply"]
        changed = False
        for index, parameter in enumerate(callee.parameters):
            changed |= _convert_operand(call, index, parameter.shape)
        changed |= _convert_root(callee, call.shape)
        return changed

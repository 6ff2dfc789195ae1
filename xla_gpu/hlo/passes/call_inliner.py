"""CallInliner: every `call` in a program computation is replaced by the
called computation's instructions (fresh module-unique names); computations
left uncalled are dropped by DCE."""

from __future__ import annotations

from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction
from .pipeline import InstructionPass

__all__ = ["CallInliner", "inline_call"]


def inline_call(call: HloInstruction) -> HloInstruction:
    """Inlines one call; returns the instruction that replaces it."""
    comp = call.parent
    callee = call.attrs["to_apply"]
    mapping: dict[int, HloInstruction] = {}
    renamed: dict[str, str] = {}
    for inst in callee.instructions:
        if inst.opcode == "parameter":
            mapping[id(inst)] = call.operands[inst.parameter_number]
            continue
        copy = inst.clone_with([mapping[id(o)] for o in inst.operands])
        copy.attrs.pop(CONTROL_PREDECESSORS, None)
        comp.add_instruction(copy)
        renamed[inst.name] = copy.name
        mapping[id(inst)] = copy
    # Control dependencies inside the callee, renamed.
    for inst in callee.instructions:
        preds = inst.attrs.get(CONTROL_PREDECESSORS)
        if preds and inst.opcode != "parameter":
            mapping[id(inst)].attrs[CONTROL_PREDECESSORS] = tuple(
                renamed[n] for n in preds if n in renamed)
    result = mapping[id(callee.root)]
    # The call's own control dependencies move to the inlined instructions.
    for pred in call.control_predecessors():
        for inst in callee.instructions:
            if inst.opcode != "parameter":
                mapping[id(inst)].add_control_predecessor(pred)
    for succ in call.control_successors():
        succ.remove_control_predecessor(call)
        succ.add_control_predecessor(result)
    call.replace_all_uses_with(result)
    comp.remove_instruction(call)
    return result


class CallInliner(InstructionPass):
    """Inlines every call; program computations are visited callees first,
    so a callee's own calls are inlined before it is."""
    name = "call-inliner"
    prunes_computations = True

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "call" or not isinstance(inst.attrs.get("to_apply"), HloComputation):
            return False
        inline_call(inst)
        return True

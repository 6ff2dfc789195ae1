"""CallInliner: every `call` is replaced by the called computation's
instructions (fresh module-unique names), in the program's computations and
in those its instructions apply (a reducer or comparator that calls another:
jax's approx_max_k reduces with a combiner that calls its comparator);
computations left uncalled are dropped."""

from __future__ import annotations

from ..graph import post_order
from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction, HloModule
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


def _callees(comp: HloComputation) -> list[HloComputation]:
    return [called for inst in comp.instructions for called in inst.called_computations]


class CallInliner(InstructionPass):
    """Inlines every call; every computation the ENTRY reaches is visited
    callees first, so a callee's own calls are inlined before it is."""
    name = "call-inliner"
    prunes_computations = True

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp in post_order([module.entry], _callees):
            changed |= self.run_on(comp)
        if changed:
            module.remove_unreachable_computations()
        return changed

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "call" or not isinstance(inst.attrs.get("to_apply"), HloComputation):
            return False
        inline_call(inst)
        return True

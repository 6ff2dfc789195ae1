"""HloConstantFolding: an instruction whose operands are all constants is
evaluated by the reference interpreter and replaced by a constant, when the
inputs and the result are small. Broadcasts and iotas are not folded (they
would turn a scalar into a large literal), nor anything with side effects,
control flow or control dependencies."""

from __future__ import annotations

import numpy as np

from ..interpreter import evaluate
from ..module import CONTROL_PREDECESSORS, HloComputation, HloError, HloInstruction, HloModule
from .pipeline import HloPass
from .util import has_side_effect, program_computations

__all__ = ["HloConstantFolding"]

_NOT_FOLDED = frozenset({
    "parameter", "constant", "broadcast", "iota", "tuple", "get-tuple-element",
    "while", "conditional", "call", "custom-call", "rng", "rng-bit-generator",
    "rng-get-and-update-state", "after-all", "fusion", "infeed", "outfeed",
    "send", "recv", "send-done", "recv-done", "opt-barrier", "optimization-barrier",
    "all-reduce", "all-gather", "partition-id", "replica-id", "sort", "topk",
})


class HloConstantFolding(HloPass):
    name = "constant-folding"

    def __init__(self, max_result_elements: int = 1024, max_input_elements: int = 65536):
        self.max_result_elements = max_result_elements
        self.max_input_elements = max_input_elements

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp in program_computations(module):
            for inst in list(comp.instructions):
                if inst.parent is not comp or not self._foldable(inst):
                    continue
                folded = self._fold(inst)
                if folded is None:
                    continue
                comp.add_instruction(folded)
                inst.replace_all_uses_with(folded)
                changed = True
            if changed:
                comp.remove_dead(has_side_effect)
        return changed

    def _foldable(self, inst: HloInstruction) -> bool:
        # Constant operands first: the test that rules out nearly every
        # instruction (the tests are independent, their order free).
        operands = inst.operands
        if not operands:
            return False
        for o in operands:
            if o.opcode != "constant" or o.literal is None or o.shape.is_tuple:
                return False
        if inst.opcode in _NOT_FOLDED or has_side_effect(inst) or inst.shape.is_tuple:
            return False
        if inst.shape.element_type == "token":
            return False
        if inst.attrs.get(CONTROL_PREDECESSORS):
            return False
        if inst.shape.num_elements > self.max_result_elements:
            return False
        return sum(o.shape.num_elements for o in inst.operands) <= self.max_input_elements

    @staticmethod
    def _fold(inst: HloInstruction) -> HloInstruction | None:
        scratch = HloComputation("constant_folding")
        operands = []
        for o in inst.operands:
            copy = o.clone_with([])
            copy.parent = scratch
            scratch._instructions.append(copy)
            operands.append(copy)
        clone = inst.clone_with(operands)
        clone.attrs.pop(CONTROL_PREDECESSORS, None)
        clone.parent = scratch
        scratch._instructions.append(clone)
        scratch.root = clone
        try:
            (value,) = evaluate(scratch)
        except (HloError, ValueError, TypeError, ArithmeticError):
            return None  # the interpreter cannot evaluate it: leave it
        value = np.asarray(value)
        if value.shape != tuple(inst.shape.dims) or value.dtype != inst.shape.dtype:
            return None
        folded = HloInstruction("constant", "constant", inst.shape, [], {}, value.copy())
        if "metadata" in inst.attrs:
            folded.attrs["metadata"] = inst.attrs["metadata"]
        return folded

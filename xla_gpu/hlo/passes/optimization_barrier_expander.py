"""OptimizationBarrierExpander: an `opt-barrier` returns its operand
unchanged, so its users read the operand directly. XLA runs this pass too;
its CPU dumps show what follows — values rematerialized behind the barrier
(jax.checkpoint) are merged back with the originals by CSE and fused
freely."""

from __future__ import annotations

from ..module import HloComputation, HloInstruction
from .pipeline import InstructionPass

__all__ = ["OptimizationBarrierExpander"]

_BARRIERS = ("opt-barrier", "optimization-barrier")


class OptimizationBarrierExpander(InstructionPass):
    name = "optimization-barrier-expander"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode not in _BARRIERS:
            return False
        inst.replace_with(inst.operands[0])
        return True

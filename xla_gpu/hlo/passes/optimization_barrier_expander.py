"""OptimizationBarrierExpander: an `opt-barrier` returns its operand
unchanged, so its users read the operand directly. XLA:CPU runs it before
CSE, and its dumps show what follows: values rematerialized behind the
barrier (jax.checkpoint) are merged back with the originals and fused
freely, so a remat saves no memory. XLA:GPU expands barriers only after
scheduling, and xla_gpu's pipeline does as XLA:GPU: it keeps them (the
thunks pass a barrier's buffers through) and leaves this pass out. It
stays here for a pipeline that wants XLA:CPU's order."""

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

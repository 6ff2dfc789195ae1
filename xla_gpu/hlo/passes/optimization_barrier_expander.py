"""OptimizationBarrierExpander: an `opt-barrier` returns its operand
unchanged, so its users read the operand directly. XLA runs this pass too;
its CPU dumps show what follows — values rematerialized behind the barrier
(jax.checkpoint) are merged back with the originals by CSE and fused
freely."""

from __future__ import annotations

from ..module import HloModule
from .pipeline import HloPass
from .util import program_instructions

__all__ = ["OptimizationBarrierExpander"]

_BARRIERS = ("opt-barrier", "optimization-barrier")


class OptimizationBarrierExpander(HloPass):
    name = "optimization-barrier-expander"

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for _, barrier in program_instructions(module):
            if barrier.opcode in _BARRIERS:
                barrier.replace_with(barrier.operands[0])
                changed = True
        return changed

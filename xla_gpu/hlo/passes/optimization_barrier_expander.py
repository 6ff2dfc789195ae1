"""OptimizationBarrierExpander: an `opt-barrier` returns its operand
unchanged, so its users read the operand directly. XLA runs this pass too;
its CPU dumps show what follows — values rematerialized behind the barrier
(jax.checkpoint) are merged back with the originals by CSE and fused
freely."""

from __future__ import annotations

from ..module import HloModule
from .pipeline import HloPass
from .util import program_computations

__all__ = ["OptimizationBarrierExpander"]

_BARRIERS = ("opt-barrier", "optimization-barrier")


class OptimizationBarrierExpander(HloPass):
    name = "optimization-barrier-expander"

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp in program_computations(module):
            for barrier in list(comp.instructions):
                if barrier.opcode not in _BARRIERS or barrier.parent is not comp:
                    continue
                barrier.replace_with(barrier.operands[0])
                changed = True
        return changed

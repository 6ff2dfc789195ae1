"""AsyncCollectivesToSync: an async collective pair (all-reduce-start /
-done, all-gather-start / -done, collective-permute-start / -done) whose
start only its done reads becomes the synchronous collective, as XLA's
ConvertAsyncCollectivesToSync does for pairs with nothing scheduled
between them. The plugin shows jax the per-device program in this form:
jaxlib's StableHLO importer cannot read the pairs back."""

from __future__ import annotations

from ..collectives import ASYNC_COLLECTIVE_DONES, ASYNC_COLLECTIVE_STARTS
from ..module import HloComputation, HloInstruction
from .pipeline import InstructionPass

__all__ = ["AsyncCollectivesToSync"]


class AsyncCollectivesToSync(InstructionPass):
    name = "async-collectives-to-sync"

    def visit(self, comp: HloComputation, done: HloInstruction) -> bool:
        if len(done.operands) != 1:
            return False
        start = done.operands[0]
        if ASYNC_COLLECTIVE_DONES.get(start.opcode) != done.opcode or len(start.users) != 1 or \
                "slice_sizes" in start.attrs:   # the in-place permute has no plain form
            return False
        sync = comp.add_instruction(start.clone_with(
            operands=start.operands, shape=done.shape,
            opcode=ASYNC_COLLECTIVE_STARTS[start.opcode]), name=start.name)
        done.replace_with(sync)
        start.replace_with(sync)
        return True

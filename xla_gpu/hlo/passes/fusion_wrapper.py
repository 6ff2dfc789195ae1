"""FusionWrapper: every instruction of a program computation that runs as a
kernel but was left unfused (a lone add, a reduce nothing fused with) is
wrapped into its own fusion, `wrapped_<op>` calling
`wrapped_<op>_computation`, as XLA's FusionWrapper does. Library calls,
control flow and the instructions that are no kernel (parameters,
constants, tuples, get-tuple-element, bitcasts) stay as they are."""

from __future__ import annotations

from ..module import HloComputation, HloInstruction
from .fusion_utils import (FUSIBLE_OPCODES, body_acceptable, create_fusion, fusion_kind_for,
                           moves_host_memory)
from .pipeline import InstructionPass

__all__ = ["FusionWrapper", "NOT_WRAPPED"]

NOT_WRAPPED = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast",
    "fusion", "call", "while", "conditional", "custom-call", "dot",
    "convolution", "sort", "topk", "rng", "rng-bit-generator",
    "rng-get-and-update-state", "after-all", "opt-barrier", "optimization-barrier",
    "infeed", "outfeed", "send", "recv", "send-done", "recv-done",
    "all-reduce", "all-gather", "all-to-all", "collective-permute",
    "reduce-scatter", "partition-id", "replica-id", "fft", "cholesky",
    "collective-broadcast", "all-reduce-start", "all-reduce-done", "all-gather-start",
    "all-gather-done", "collective-permute-start", "collective-permute-done",
    "triangular-solve", "add-dependency", "domain", "copy-start",
    "copy-done", "async-start", "async-done", "async-update", "ragged-all-to-all"})


class FusionWrapper(InstructionPass):
    name = "fusion-wrapper"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode in NOT_WRAPPED:
            return False
        if inst.opcode not in FUSIBLE_OPCODES and inst.opcode != "copy":
            return False  # no emitter computes it: left to its own thunk
        if moves_host_memory(inst):
            return False  # to or from host memory: a memcpy, not a kernel
        op = inst.opcode.replace("-", "_")
        fusion = create_fusion(inst, name=f"wrapped_{op}",
                               computation_name=f"wrapped_{op}_computation")
        fusion.attrs["kind"] = fusion_kind_for(body_acceptable(fusion.attrs["calls"]))
        return True

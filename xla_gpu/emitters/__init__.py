"""Hero-based emitters: HLO fusion -> MLIR in the xla_gpu dialect.

    from xla_gpu import emitters, hlo
    kernel = emitters.emit(hlo.parse_module(text))     # EmittedKernel
    print(kernel.module, kernel.launch)
"""

from __future__ import annotations

from mlir import ir

from ..analysis.fusion import Fusion, select_fusion
from ..hlo import HloError, HloModule, parse_module
from .base import EmittedKernel, KernelEmitter, LaunchDims
from .concatenate import ConcatenateEmitter
from .convolution import ConvolutionEmitter
from .in_place_dus import InPlaceDynamicUpdateSliceEmitter
from .input_slices import InputSlicesEmitter
from .loop import LoopEmitter
from .reduction import ReductionEmitter, ReductionRefused
from .scatter import ScatterEmitter
from .sort import SortEmitter
from .transpose import TransposeEmitter, TransposeRefused

__all__ = ["emit", "emit_fusion", "emitter_for", "EmittedKernel", "LaunchDims",
           "KernelEmitter"]

_EMITTERS = {
    "loop": LoopEmitter,
    "concatenate": ConcatenateEmitter,
    "in_place_dynamic_update_slice": InPlaceDynamicUpdateSliceEmitter,
    "input_slices": InputSlicesEmitter,
    "transpose": TransposeEmitter,
    "reduction": ReductionEmitter,
    "scatter": ScatterEmitter,
    "sort": SortEmitter,
    "topk": SortEmitter,
    "convolution": ConvolutionEmitter,
}

# Heroes whose dedicated emitters are not written yet or refuse some
# fusions, and why the loop emitter can stand in for them (it computes the
# same values, slower).
_LOOP_FALLBACK = {
    # TransposeEmitter refuses transposes of different normalized shapes in
    # one fusion, side outputs without the transpose input's number of
    # elements, epilogues that reorder elements, a transpose feeding another,
    # and tiles that need more shared memory than a block has.
    "transpose": "the tiled transpose emitter refused it; the loop emitter "
                 "reads the input uncoalesced",
    # ReductionEmitter refuses reduced dimensions that are not contiguous,
    # reduce heroes of different shapes and epilogues that are not
    # elementwise.
    "reduction": "the reduction emitter refused it; the loop emitter "
                 "reduces sequentially in each thread",
}


def emitter_for(fusion: Fusion) -> KernelEmitter:
    kind = fusion.kind
    if kind in _EMITTERS:
        try:
            return _EMITTERS[kind](fusion)
        except (TransposeRefused, ReductionRefused) as e:
            fusion.notes.append(f"{kind} fusion emitted by the loop emitter: "
                                f"{_LOOP_FALLBACK[kind]} ({e})")
            return LoopEmitter(fusion)
    if kind in _LOOP_FALLBACK:
        fusion.notes.append(f"{kind} fusion emitted by the loop emitter: {_LOOP_FALLBACK[kind]}")
        return LoopEmitter(fusion)
    raise HloError(f"fusion '{fusion.name}': the {kind} emitter is not implemented yet")


def emit_fusion(fusion: Fusion, context: ir.Context) -> EmittedKernel:
    return emitter_for(fusion).emit(context)


def emit(module: HloModule | str, context: ir.Context | None = None,
         fusion: str | None = None) -> EmittedKernel:
    """Emits one fusion of `module` (HLO text or a parsed module)."""
    from .. import ir as xla_ir
    if isinstance(module, str):
        module = parse_module(module)
    return emit_fusion(select_fusion(module, fusion), context or xla_ir.Context())

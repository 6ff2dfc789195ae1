"""Hero-based emitters: HLO fusion -> MLIR in the xla_gpu dialect.

    from xla_gpu import emitters, hlo
    kernel = emitters.emit(hlo.parse_module(text))     # EmittedKernel
    print(kernel.module, kernel.launch)

The fusion analysis (`analysis.fusion.analyze`) decides which emitter runs
(`Fusion.kind`); a fusion the dedicated emitter cannot take is given to the
loop emitter there, with a note saying why.
"""

from __future__ import annotations

from mlir import ir

from ..analysis.fusion import Fusion, select_fusion
from ..errors import UnsupportedError
from ..hlo import HloModule, parse_module
from .base import EmittedKernel, KernelEmitter, LaunchDims
from .concatenate import ConcatenateEmitter
from .convolution import ConvolutionEmitter
from .gemm import GemmEmitter
from .in_place_dus import InPlaceDynamicUpdateSliceEmitter
from .input_slices import InputSlicesEmitter
from .loop import LoopEmitter
from .reduction import reduction_emitter
from .scatter import ScatterEmitter
from .sort import SortEmitter
from .transpose import transpose_emitter

__all__ = ["emit", "emit_fusion", "emitter_for", "EmittedKernel", "LaunchDims",
           "KernelEmitter"]

_EMITTERS = {
    "loop": LoopEmitter,
    "concatenate": ConcatenateEmitter,
    "in_place_dynamic_update_slice": InPlaceDynamicUpdateSliceEmitter,
    "input_slices": InputSlicesEmitter,
    "transpose": transpose_emitter,   # padded or packed tile
    "reduction": reduction_emitter,   # the row, multi-row or column variant
    "scatter": ScatterEmitter,
    "sort": SortEmitter,
    "topk": SortEmitter,
    "convolution": ConvolutionEmitter,
    "gemm": GemmEmitter,
}

def emitter_for(fusion: Fusion) -> KernelEmitter:
    """The emitter of `fusion.kind`, which the fusion analysis chose."""
    make = _EMITTERS.get(fusion.kind)
    if make is None:
        raise UnsupportedError(f"fusion '{fusion.name}': the {fusion.kind} emitter is "
                               "not implemented yet")
    return make(fusion)


def emit_fusion(fusion: Fusion, context: ir.Context) -> EmittedKernel:
    return emitter_for(fusion).emit(context)


def emit(module: HloModule | str, context: ir.Context | None = None,
         fusion: str | None = None) -> EmittedKernel:
    """Emits one fusion of `module` (HLO text or a parsed module)."""
    from .. import ir as xla_ir
    if isinstance(module, str):
        module = parse_module(module)
    return emit_fusion(select_fusion(module, fusion), context or xla_ir.Context())

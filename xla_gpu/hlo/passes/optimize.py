"""`optimize`: XLA:GPU's HLO optimization pipeline, in its order:

  sharding annotations removed (one device: each is its operand),
  control-flow layouts (copies where a while, conditional or call and its
    computation disagree on a layout),
  call inlining, host offloads marked (hlo.passes.host_offloading; other
    memory placements removed) (optimization barriers kept, as XLA:GPU keeps them until
    after scheduling: a remat's recomputation stays), batched gather/scatter
    normalization, select-and-scatter as reduce-window + scatter,
    rng-bit-generator as elementwise Philox / Threefry over iotas,
    cholesky and triangular-solve as loops (no solver library here)
  simplification (fixed point): algebraic simplifier, tuple
    simplifier, constant folding, DCE; CSE
  layout assignment (entry layouts, dot operand layouts, propagation,
    copies at conflicts)
  custom-call layouts (operands relayouted to what handlers read)
  layout normalization (transposes explicit, free reshapes as bitcasts)
  dot canonicalization (gemm-ready dots)
  reduction rewrites: dimension grouping, splitting, tree reductions
  simplification again
  GemmFusion (dots with prologues / epilogues as __triton_gemm fusions)
  GemmRewriter (the dots GemmFusion left to the library: a bias, beta * C,
    ReLU / GELU after them as a __cublas$lt$matmul epilogue; not on the
    cpu target, `gemm_epilogues`)
  PriorityFusion, multi-output fusion
  collective combiners (independent all-gathers, reduce-scatters and
    all-reduces of one kind as one variadic collective)
  CSE, DCE
  fusion wrapper (every unfused kernel op in its own fusion)
  host offloading (values sent to host memory and back: copies to memory
    space 5 and back), XLA's names
  copy insertion
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading

from ..module import HloModule
from .algebraic_simplifier import AlgebraicSimplifier
from .call_inliner import CallInliner
from .collective_combiners import AllGatherCombiner, AllReduceCombiner, ReduceScatterCombiner
from .constant_folding import HloConstantFolding
from .control_dep_converter import ControlDepConverter
from .control_flow_layouts import ControlFlowLayouts
from .copy_insertion import CopyInsertion
from .cse import HloCSE
from .custom_call_layouts import CustomCallLayouts
from .dce import HloDCE
from .dot_canonicalization import DotCanonicalization
from .dot_merger import DotMerger
from .fusion_wrapper import FusionWrapper
from .gemm_fusion import GemmFusion
from .gemm_rewriter import GemmRewriter
from .gather_scatter_normalizer import BatchedGatherScatterNormalizer
from .layout_assignment import LayoutAssignment
from .layout_normalization import LayoutNormalization
from .linalg_expanders import CholeskyExpander, TriangularSolveExpander
from .multi_output_fusion import MultiOutputFusion
from .pipeline import DumpOptions, HloPassFix, HloPassPipeline, PassContext
from .priority_fusion import PriorityFusion
from .reduction_rewrites import (ReductionDimensionGrouper, ReductionSplitter,
                                 TreeReductionRewriter)
from .rename_fusions import RenameFusions
from .rng_bit_generator_expander import RngBitGeneratorExpander
from .select_and_scatter_expander import SelectAndScatterExpander
from .host_offloading import HostOffloader, HostOffloadMarker
from .sharding_annotations import ShardingAnnotationRemover
from .transpose_folding import TransposeFolding
from .tuple_simplifier import TupleSimplifier
from .while_loop_trip_count import WhileLoopTripCountAnnotator

__all__ = ["optimize", "optimization_pipeline"]


def _simplification(name: str) -> HloPassPipeline:
    return HloPassPipeline(name, [
        HloPassFix(HloPassPipeline("simplification-fixed-point", [
            AlgebraicSimplifier(), TupleSimplifier(), HloConstantFolding(), HloDCE(),
        ])),
        HloCSE(), HloDCE(),
    ])


def optimization_pipeline(gemm_fusion_max_multiply_adds: int | None = None,
                          gemm_epilogues: bool = True) -> HloPassPipeline:
    """XLA:GPU's pipeline; `gemm_fusion_max_multiply_adds`: dots larger than
    that stay gemm thunks instead of GEMM fusions (the cpu target's
    emulated GEMM kernel is slower than BLAS past small sizes);
    `gemm_epilogues=False` leaves GemmRewriter out (the cpu target: its
    compiled elementwise kernel after the BLAS product is faster than numpy
    applying the epilogue in the gemm thunk)."""
    return HloPassPipeline("optimization", [
        ShardingAnnotationRemover(),
        ControlDepConverter(),
        ControlFlowLayouts(),
        CallInliner(),
        HostOffloadMarker(),
        BatchedGatherScatterNormalizer(),
        SelectAndScatterExpander(),
        RngBitGeneratorExpander(),
        CholeskyExpander(),
        TriangularSolveExpander(),
        _simplification("simplification"),
        LayoutAssignment(),
        CustomCallLayouts(),
        LayoutNormalization(),
        TransposeFolding(),
        DotCanonicalization(),
        HloPassFix(HloPassPipeline("reduction-rewrites", [
            ReductionDimensionGrouper(), ReductionSplitter(), TreeReductionRewriter(),
        ])),
        _simplification("post-layout-simplification"),
        DotMerger(),
        LayoutNormalization(),
        WhileLoopTripCountAnnotator(),
        GemmFusion(max_multiply_adds=gemm_fusion_max_multiply_adds),
        *([GemmRewriter()] if gemm_epilogues else []),
        PriorityFusion(),
        MultiOutputFusion(),
        AllGatherCombiner(),
        ReduceScatterCombiner(),
        AllReduceCombiner(),
        HloCSE(),
        HloDCE(),
        FusionWrapper(),
        HostOffloader(),
        RenameFusions(),
        CopyInsertion(),
        HloDCE(),
    ])


def optimize(module: HloModule, dump_dir: str | os.PathLike | None = None,
             dump_regex: str = ".*", verify: bool = False,
             context: PassContext | None = None,
             gemm_fusion_max_multiply_adds: int | None = None,
             gemm_epilogues: bool = True) -> HloModule:
    """The optimized copy of `module` (the argument is left as it is).
    With `dump_dir`: before_optimizations.txt, NN.<pass>.txt after each
    pass matching `dump_regex` that changed the module, and
    after_optimizations.txt. `verify` runs the verifier after every pass
    that changed the module. A `context` given collects per-pass
    statistics (runs that changed the module, seconds).
    `gemm_fusion_max_multiply_adds`, `gemm_epilogues`: see
    `optimization_pipeline`."""
    dump = DumpOptions(str(dump_dir) if dump_dir is not None else None, dump_regex)
    dump.write("before_optimizations.txt", module)
    result = module.clone()
    if context is None:
        context = PassContext()
    context.dump, context.verify = dump, verify
    with cyclic_gc_paused():
        optimization_pipeline(gemm_fusion_max_multiply_adds, gemm_epilogues).run(result, context)
    dump.write("after_optimizations.txt", result)
    return result


_gc_lock = threading.Lock()
_gc_pauses = 0             # pipelines running now, on any thread
_gc_was_enabled = False    # the setting the first of them found


@contextlib.contextmanager
def cyclic_gc_paused():
    """Pauses Python's cyclic garbage collector while the pipeline runs:
    each of its full collections walks every instruction of the module
    (their operand and user lists point at each other), and the passes
    allocate enough to trigger several (a quarter to a third of the
    passes' time on a training step). The fusion passes unlink their trial
    bodies themselves, so little cyclic garbage is left for after. Counted
    across threads (the PJRT plugin compiles on several): the last
    pipeline to finish restores the setting the first one found."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                _promote_survivors()
                gc.enable()


def _promote_survivors() -> None:
    """Moves what the pipeline allocated (the optimized module, chiefly)
    to the oldest generation without a collection: the first young
    collection after the pause would otherwise walk all of it, and the
    next middle one again (tens of ms on a training step). `freeze` then
    `unfreeze` is that move; skipped when the process froze objects itself
    (unfreeze would release them)."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()

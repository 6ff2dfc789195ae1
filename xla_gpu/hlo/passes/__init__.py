"""HLO passes: XLA:GPU's optimization pipeline in Python (numpy only; no
MLIR). `optimize` turns the HLO JAX prints before optimizations into fused
HLO that reads like XLA's after_optimizations dump:

    from xla_gpu.hlo.passes import optimize
    fused = optimize(module, dump_dir="/tmp/dump", dump_regex=".*")

Each pass is an `HloPass` (`run(module) -> changed`) in its own module;
those that rewrite one computation at a time are `ComputationPass`es
(`run_on(comp) -> changed`), one instruction at a time `InstructionPass`es
(`visit(comp, inst) -> changed`), the fusion passes `FusionPass`es (XLA's
fusion size limits). `optimization_pipeline()` lists them in XLA:GPU's
order.
"""

from .pipeline import (ComputationPass, DumpOptions, HloPass, HloPassFix, HloPassPipeline,
                       InstructionPass, PassContext)
from .verifier import verify_module
from .dce import HloDCE
from .cse import HloCSE
from .call_inliner import CallInliner
from .sharding_annotations import ShardingAnnotationRemover
from .tuple_simplifier import TupleSimplifier
from .algebraic_simplifier import AlgebraicSimplifier
from .constant_folding import HloConstantFolding
from .gather_scatter_normalizer import BatchedGatherScatterNormalizer
from .optimization_barrier_expander import OptimizationBarrierExpander
from .select_and_scatter_expander import SelectAndScatterExpander
from .rng_bit_generator_expander import RngBitGeneratorExpander
from .layout_assignment import LayoutAssignment
from .custom_call_layouts import CustomCallLayouts
from .layout_normalization import LayoutNormalization
from .dot_canonicalization import DotCanonicalization
from .transpose_folding import TransposeFolding
from .reduction_rewrites import (ReductionDimensionGrouper, ReductionSplitter,
                                 TreeReductionRewriter)
from .cost_model import NodeCost, fused_cost, kernel_time, node_cost
from .gemm_fusion import GemmFusion
from .gemm_rewriter import GemmRewriter
from .priority_fusion import PriorityFusion
from .multi_output_fusion import MultiOutputFusion
from .fusion_wrapper import FusionWrapper
from .host_offloading import HostOffloader, HostOffloadMarker
from .rename_fusions import RenameFusions
from .copy_insertion import CopyInsertion
from .optimize import optimization_pipeline, optimize

__all__ = [
    "optimize", "optimization_pipeline",
    "DumpOptions", "HloPass", "ComputationPass", "InstructionPass", "HloPassFix",
    "HloPassPipeline",
    "PassContext", "verify_module", "HloDCE", "HloCSE", "ShardingAnnotationRemover",
    "CallInliner", "TupleSimplifier",
    "AlgebraicSimplifier", "HloConstantFolding", "BatchedGatherScatterNormalizer",
    "OptimizationBarrierExpander",
    "SelectAndScatterExpander", "RngBitGeneratorExpander",
    "LayoutAssignment", "CustomCallLayouts", "LayoutNormalization", "TransposeFolding", "DotCanonicalization",
    "ReductionDimensionGrouper",
    "ReductionSplitter", "TreeReductionRewriter", "NodeCost", "node_cost",
    "fused_cost", "kernel_time", "GemmFusion", "GemmRewriter", "PriorityFusion", "MultiOutputFusion",
    "FusionWrapper", "HostOffloadMarker", "HostOffloader", "RenameFusions", "CopyInsertion",
]

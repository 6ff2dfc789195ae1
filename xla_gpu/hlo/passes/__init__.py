"""HLO passes: XLA:GPU's optimization pipeline in Python (numpy only).

    from xla_gpu.hlo.passes import optimize
    fused = optimize(module, dump_dir="/tmp/dump", dump_regex=".*")
"""

from .pipeline import DumpOptions, HloPass, HloPassFix, HloPassPipeline, PassContext
from .verifier import verify_module
from .dce import HloDCE
from .cse import HloCSE
from .call_inliner import CallInliner
from .tuple_simplifier import TupleSimplifier
from .algebraic_simplifier import AlgebraicSimplifier
from .constant_folding import HloConstantFolding

__all__ = ["DumpOptions", "HloPass", "HloPassFix", "HloPassPipeline", "PassContext",
           "verify_module", "HloDCE", "HloCSE", "CallInliner", "TupleSimplifier",
           "AlgebraicSimplifier", "HloConstantFolding"]

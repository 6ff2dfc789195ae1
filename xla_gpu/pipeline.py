"""The lowering pipeline of seed 000, from emitted xla_gpu IR to the LLVM
and NVVM dialects, as one pipeline string and one function.

    from xla_gpu import ir, pipeline
    ctx = ir.Context()
    module = mlir_ir.Module.parse(text, ctx)
    pipeline.run(module, dump_dir="/tmp/dump", dump_regex="flatten|vectorize")

With `dump_dir`, the passes run one by one and the IR after every pass whose
name matches `dump_regex` is written to `NN.<pass>.mlir` (the analog of
XLA's --xla_dump_hlo_pass_re); `timings` collects seconds per pass.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from mlir import ir as _ir
from mlir.passmanager import PassManager

from . import ir as _xla_ir  # noqa: F401  (registers the xla_gpu passes)

__all__ = ["PASSES", "pipeline_string", "pass_name", "run"]

# Stage by stage, as seed 000 walks through them. Each entry is one element
# of a `builtin.module(...)` pipeline.
PASSES: tuple[str, ...] = (
    "inline",                                   # pure_call with one caller
    "cse",
    "func.func(xla-lower-xla-to-scf)",          # loop -> scf.for + scf.if
    "canonicalize",
    "func.func(xla-simplify-arith)",            # xla.range decides the bounds checks
    "canonicalize",
    "cse",
    "xla-propagate-slice-indices",              # buffer slices of callee params
    "xla-flatten-tensors",                      # N-d -> 1-d, composed indexing
    "canonicalize",
    "cse",
    "loop-invariant-code-motion",
    "func.func(xla-vectorize-loads-stores)",    # transfer_read/write
    "func.func(xla-gpu-optimize-loops)",        # unroll the vector loop
    "canonicalize",
    "cse",
    "func.func(xla-convert-pure-call-ops)",
    "xla-erase-dead-functions",
    "func.func(xla-simplify-arith)",
    "xla-simplify-affine",                      # apply_indexing -> (i32) arith
    "canonicalize",
    "cse",
    "xla-lower-tensors",                        # bare pointers, loads, stores
    "xla-merge-pointers",                       # one argument per buffer slice
    "canonicalize",
    "cse",
    "xla-expand-float-ops",                     # bf16 math through f32
    "convert-scf-to-cf",
    "xla-lower-to-llvm",                        # llvm + nvvm, libdevice calls
    "reconcile-unrealized-casts",
    "canonicalize",
    "cse",
)


def pipeline_string(passes: tuple[str, ...] = PASSES) -> str:
    return "builtin.module(" + ",".join(passes) + ")"


def pass_name(element: str) -> str:
    # "func.func(xla-lower-xla-to-scf)" -> "xla-lower-xla-to-scf"
    inner = element[element.rfind("(") + 1:].rstrip(")") if "(" in element else element
    return inner.split("{")[0]


def run(module: _ir.Module, *, dump_dir: str | Path | None = None,
        dump_regex: str = ".*", timings: dict[str, float] | None = None,
        passes: tuple[str, ...] = PASSES) -> None:
    """Runs the pipeline on `module` in place. Raises mlir.ir.MLIRError with
    the pass's diagnostics when a pass fails."""
    if dump_dir is None and timings is None:
        PassManager.parse(pipeline_string(passes), module.context).run(module.operation)
        return
    pattern = re.compile(dump_regex)
    if dump_dir is not None:
        dump_dir = Path(dump_dir)
        dump_dir.mkdir(parents=True, exist_ok=True)
        (dump_dir / "00.input.mlir").write_text(str(module))
    for i, element in enumerate(passes, start=1):
        name = pass_name(element)
        start = time.perf_counter()
        PassManager.parse(pipeline_string((element,)), module.context).run(
            module.operation)
        if timings is not None:
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
        if dump_dir is not None and pattern.search(name):
            (dump_dir / f"{i:02d}.{name}.mlir").write_text(str(module))

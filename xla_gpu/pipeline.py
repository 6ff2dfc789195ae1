"""The lowering pipeline of seed 000, from emitted xla_gpu IR to the LLVM
and NVVM dialects (target "cuda") or to a grid-emulating LLVM-dialect module
for the host (target "cpu"), as one pipeline string and one function.

    from xla_gpu import ir, pipeline
    ctx = ir.Context()
    module = mlir_ir.Module.parse(text, ctx)
    pipeline.run(module, dump_dir="/tmp/dump", dump_regex="flatten|vectorize")
    pipeline.run(module, target="cpu", threads=128, blocks=24576)

The two targets share every pass up to xla-expand-float-ops; then "cuda"
lowers warp shuffles to gpu.shuffle (xla-lower-shuffle-reduce) and lowers
to NVVM (xla-lower-to-llvm), and "cpu" turns the launch grid into loops
(xla-emulate-grid, which also emulates the warp shuffles) and lowers for
the host (xla-lower-to-host).

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

__all__ = ["PASSES", "TARGETS", "passes_for", "pipeline_string", "pass_name",
           "run"]

TARGETS = ("cuda", "cpu")

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
    # bare pointers, loads, stores; f16/bf16 atomic adds native on NVPTX
    "xla-lower-tensors{native-16bit-float-add=true}",
    "xla-merge-pointers",                       # one argument per buffer slice
    "canonicalize",
    "cse",
    "xla-expand-float-ops",                     # bf16 math through f32
    "func.func(xla-lower-shuffle-reduce)",      # warp shuffles (cpu: emulated)
    "convert-scf-to-cf",
    "xla-lower-to-llvm",                        # llvm + nvvm, libdevice calls
    "reconcile-unrealized-casts",
    "canonicalize",
    "cse",
)


# The passes both targets run: everything up to xla-expand-float-ops (the
# host keeps 16-bit float atomic adds as CAS loops: no options there).
_SHARED = tuple(p.split("{")[0] if p.startswith("xla-lower-tensors{") else p
                for p in PASSES[:PASSES.index("xla-expand-float-ops") + 1])

# The cpu target after xla-emulate-grid (the grid as loops: blocks, then one
# loop over the threads per phase between barriers): host LLVM, libm calls.
_CPU_LOWERING = (
    "convert-scf-to-cf",
    "xla-lower-to-host",                        # llvm, libm, bf16 via f32
    "reconcile-unrealized-casts",
    "canonicalize",
    "cse",
)


def passes_for(target: str = "cuda", *, threads: int | None = None,
               blocks: int | None = None) -> tuple[str, ...]:
    """The pipeline elements of `target`. For "cpu", `threads` (per block)
    and `blocks` are the launch dimensions; None takes them from the
    `xla.range` of gpu.thread_id / gpu.block_id."""
    if target == "cuda":
        if threads is not None or blocks is not None:
            raise ValueError("launch dimensions are options of the cpu target only")
        return PASSES
    if target != "cpu":
        raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
    options = []
    for name, value in (("threads", threads), ("blocks", blocks)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
        options.append(f"{name}={value}")
    emulate = "xla-emulate-grid" + ("{" + " ".join(options) + "}" if options else "")
    return _SHARED + (emulate,) + _CPU_LOWERING


def pipeline_string(passes: tuple[str, ...] | None = None, *, target: str = "cuda",
                    threads: int | None = None, blocks: int | None = None) -> str:
    """The `builtin.module(...)` pipeline of `passes`, by default those of
    `target` (see passes_for)."""
    if passes is None:
        passes = passes_for(target, threads=threads, blocks=blocks)
    return "builtin.module(" + ",".join(passes) + ")"


def pass_name(element: str) -> str:
    # "func.func(xla-lower-xla-to-scf)" -> "xla-lower-xla-to-scf"
    inner = element[element.rfind("(") + 1:].rstrip(")") if "(" in element else element
    return inner.split("{")[0]


def run(module: _ir.Module, *, dump_dir: str | Path | None = None,
        dump_regex: str = ".*", timings: dict[str, float] | None = None,
        passes: tuple[str, ...] | None = None, target: str = "cuda",
        threads: int | None = None, blocks: int | None = None) -> None:
    """Runs the pipeline on `module` in place: `passes`, else those of
    `target` ("cuda" or "cpu", with the cpu target's launch dimensions
    `threads` and `blocks`). Raises mlir.ir.MLIRError with the pass's
    diagnostics when a pass fails."""
    if passes is None:
        passes = passes_for(target, threads=threads, blocks=blocks)
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

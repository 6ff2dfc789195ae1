"""The lowering pipeline: emitted xla_gpu IR to the LLVM and NVVM dialects
(target "cuda") or to a grid-emulating LLVM-dialect module for the host
(target "cpu"), as named stages.

    from xla_gpu import ir, pipeline
    ctx = ir.Context()
    module = mlir_ir.Module.parse(text, ctx)
    pipeline.run(module, dump_dir="/tmp/dump", dump_regex="flatten|vectorize")
    pipeline.run(module, target="cpu", threads=128, blocks=24576)
    pipeline.stages_for("cuda")         # (Stage("optimization", ...), ...)

The stages, as XLA names its own:

  optimization          xla_gpu ops made explicit: subgraph calls inlined,
                        loops lowered to scf.for + scf.if, index arithmetic
                        simplified with the thread/block ranges
  loop-transformation   tensors flattened to 1-d, loads and stores
                        vectorized, the vector loops unrolled
  lowering              pure calls and dead functions resolved, indexing to
                        (i32) arith, tensors to bare pointers, complex
                        values as pairs of floats, one argument per buffer
                        slice, 16-bit float math through f32
  then one backend stage:
  cuda-lowering         warp shuffles to gpu.shuffle, LLVM + NVVM with
                        libdevice calls (xla_gpu.backends.cuda takes it on
                        to PTX and a cubin)
  cpu-lowering          the launch grid as loops over blocks and, per phase
                        between barriers, threads (warp shuffles emulated in
                        lane order), host LLVM (xla_gpu.backends.cpu JITs it
                        or links a shared object)

Every element is one element of a `builtin.module(...)` pipeline, so the
pipeline runs unchanged in the upstream `mlir-opt` with the plugin
(`pipeline_string()`). Without dumps or timings it runs as one pass
manager (the cpu target's as three: the passes before and after the grid
emulation in pass managers that all launch shapes share), verifying its
result once. With `dump_dir`, the passes run one by one and the IR after every
pass whose name matches `dump_regex` is written to `NN.<pass>.mlir`, and
after every stage to `stage.<stage>.mlir` (the analog of XLA's
--xla_dump_hlo_pass_re); `timings` collects seconds per pass and, under
`stage:<name>`, per stage.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from mlir import ir as _ir
from mlir.passmanager import PassManager

from . import ir as _xla_ir  # noqa: F401  (registers the xla_gpu passes)
from . import _pass_runner
from .errors import ArgumentError

__all__ = ["Stage", "STAGES", "PASSES", "TARGETS", "stages_for", "passes_for",
           "pipeline_string", "pass_name", "run"]


@dataclass(frozen=True)
class Stage:
    """A named run of passes: `passes` are elements of a
    `builtin.module(...)` pipeline."""
    name: str
    passes: tuple[str, ...]


# The canonicalizer and inliner as the kernels need them, measured on the
# bench corpus (the same IR out, up to SSA names and the order of
# constants, on all 43 corpus and test fusions): no region simplification
# (block merging and region DCE find nothing in an emitted kernel, and
# LLVM drops dead blocks anyway), and no canonicalization of each callee
# inside the inliner (the canonicalize after it does that once). Together
# 15-30% of the pipeline. One sweep of the greedy driver's worklist: the
# driver's second sweep over every op only confirms the fixpoint (the
# worklist already revisits what a rewrite touched), and cost a tenth of
# the pipeline. Measured on 355 kernels (those of the bench models gpt,
# convnet, lstm, dpsgd and scanned_transformer, and of bench/corpus), both
# targets: the same final module, text for text, as with the driver
# iterating to its fixpoint and with the passes left out below (a cse after the inliner, a canonicalize before
# xla-simplify-arith, which runs one after it, a cse closing the loop
# transformation, which the lowering's first cse repeats).
CANONICALIZE = "canonicalize{region-simplify=disabled max-iterations=1}"
INLINE = "inline{default-pipeline=}"

OPTIMIZATION = Stage("optimization", (
    INLINE,                                     # pure_call with one caller
    "func.func(xla-lower-xla-to-scf)",          # loop -> scf.for + scf.if
    "func.func(xla-simplify-arith)",            # xla.range decides the bounds checks
    CANONICALIZE,
    "cse",
))

LOOP_TRANSFORMATION = Stage("loop-transformation", (
    "xla-propagate-slice-indices",              # buffer slices of callee params
    "xla-flatten-tensors",                      # N-d -> 1-d, composed indexing
    CANONICALIZE,
    "cse",
    "loop-invariant-code-motion",
    "func.func(xla-vectorize-loads-stores)",    # transfer_read/write
    "func.func(xla-gpu-optimize-loops)",        # unroll the vector loop
    CANONICALIZE,
))


def _lowering(native_16bit_float_add: bool) -> Stage:
    # cuda: f16/bf16 atomic adds are native (atom.add.noftz) and f32 adds of
    # 2 or 4 lanes one vector reduction; the host keeps CAS loops and lanes.
    lower_tensors = "xla-lower-tensors{native-16bit-float-add=true vector-float-add=true}" \
        if native_16bit_float_add else "xla-lower-tensors"
    return Stage("lowering", (
        "func.func(xla-convert-pure-call-ops)",
        "xla-erase-dead-functions",
        "func.func(xla-simplify-arith)",
        "xla-simplify-affine",                  # apply_indexing -> (i32) arith
        CANONICALIZE,
        "cse",
        lower_tensors,                          # bare pointers, loads, stores
        # complex math on the parts: the upstream convert-complex-to-standard,
        # run only on a module with a complex value (it visits every op of a
        # kernel to find none in most: 2% of the pipeline).
        "xla-complex-to-standard",
        "xla-expand-complex",                   # complex values as two floats
        "xla-merge-pointers",                   # one argument per buffer slice
        CANONICALIZE,
        "cse",
        "xla-expand-float-ops",                 # bf16 math through f32
    ))


CUDA_LOWERING = Stage("cuda-lowering", (
    "func.func(xla-lower-shuffle-reduce)",      # warp shuffles -> gpu.shuffle
    "convert-scf-to-cf",
    "xla-lower-to-llvm",                        # llvm + nvvm, libdevice calls
    "reconcile-unrealized-casts",
    CANONICALIZE,
    "cse",
))

# The cpu target after xla-emulate-grid (the grid as loops: blocks, then one
# loop over the threads per phase between barriers): scalar accesses and
# polynomial math so that LLVM vectorizes the thread loops, then host LLVM.
_CPU_LOWERING = (
    "xla-scalarize-vector-memory",              # vector<4xf32> loads -> 4 loads
    CANONICALIZE,                               # extract(from_elements) folds
    "xla-approximate-host-math",                # exp/log/tanh/erf as arith
    "convert-scf-to-cf",
    # llvm, libm, bf16 via f32; it reconciles what unrealized casts are
    # left itself (a reconcile-unrealized-casts after it walked the whole
    # module again for none).
    "xla-lower-to-host",
    CANONICALIZE,
    "cse",
)


def _launch_options(threads: int | None, blocks: int | None) -> str:
    options = []
    for name, value in (("threads", threads), ("blocks", blocks)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ArgumentError(f"{name} must be a positive int, got {value!r}")
        options.append(f"{name}={value}")
    return "{" + " ".join(options) + "}" if options else ""


def _cuda_stages(threads: int | None, blocks: int | None) -> tuple[Stage, ...]:
    if threads is not None or blocks is not None:
        raise ArgumentError("launch dimensions are options of the cpu target only")
    return (OPTIMIZATION, LOOP_TRANSFORMATION, _lowering(native_16bit_float_add=True),
            CUDA_LOWERING)


def _cpu_stages(threads: int | None, blocks: int | None) -> tuple[Stage, ...]:
    # The grid emulation takes the launch dimensions (None: from the
    # `xla.range` of gpu.thread_id / gpu.block_id).
    emulate = "xla-emulate-grid" + _launch_options(threads, blocks)
    return (OPTIMIZATION, LOOP_TRANSFORMATION, _lowering(native_16bit_float_add=False),
            Stage("cpu-lowering", (emulate,) + _CPU_LOWERING))


# The stages of each target, by its launch dimensions: the table the
# target's backend reads (`xla_gpu.backends.get(target).stages()`), here
# because the backends run this pipeline and it cannot ask them.
_STAGES_OF = {"cuda": _cuda_stages, "cpu": _cpu_stages}
TARGETS = tuple(_STAGES_OF)
STAGES: dict[str, tuple[Stage, ...]] = {
    target: stages(None, None) for target, stages in _STAGES_OF.items()}

# The cuda pipeline, element by element.
PASSES: tuple[str, ...] = tuple(p for stage in STAGES["cuda"] for p in stage.passes)


def stages_for(target: str = "cuda", *, threads: int | None = None,
               blocks: int | None = None) -> tuple[Stage, ...]:
    """The stages of `target`. For "cpu", `threads` (per block) and
    `blocks` are the launch dimensions; None takes them from the
    `xla.range` of gpu.thread_id / gpu.block_id."""
    if target not in _STAGES_OF:
        raise ArgumentError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
    return _STAGES_OF[target](threads, blocks)


def passes_for(target: str = "cuda", *, threads: int | None = None,
               blocks: int | None = None) -> tuple[str, ...]:
    """The pipeline elements of `target`, stage after stage."""
    return tuple(p for stage in stages_for(target, threads=threads, blocks=blocks)
                 for p in stage.passes)


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


# An element with a kernel's launch dimensions among its options (the cpu
# target's xla-emulate-grid{threads=.. blocks=..}).
_LAUNCH_OPTION = re.compile(r"[{ ](threads|blocks)=")


def _segments(elements: tuple[str, ...]) -> list[tuple[str, ...]]:
    """`elements` cut into the pass managers that run them: each element
    with launch dimensions alone, the runs between them together. The
    pass managers are parsed once per thread and pipeline text, and a
    program's kernels have many launch dimensions: in one pipeline each
    would parse and initialize every pass again (a millisecond or two a
    kernel), cut this way only the grid emulation."""
    segments: list[tuple[str, ...]] = []
    run: list[str] = []
    for element in elements:
        if _LAUNCH_OPTION.search(element):
            if run:
                segments.append(tuple(run))
                run = []
            segments.append((element,))
        else:
            run.append(element)
    if run:
        segments.append(tuple(run))
    return segments


def run(module: _ir.Module, *, dump_dir: str | Path | None = None,
        dump_regex: str = ".*", timings: dict[str, float] | None = None,
        passes: tuple[str, ...] | None = None, target: str = "cuda",
        threads: int | None = None, blocks: int | None = None,
        stages: tuple[Stage, ...] | None = None) -> None:
    """Runs the pipeline on `module` in place: `passes` (one unnamed stage),
    else `stages`, else those of `target` ("cuda" or "cpu", with the cpu
    target's launch dimensions `threads` and `blocks`). Raises
    mlir.ir.MLIRError with the pass's diagnostics when a pass fails."""
    if passes is not None:
        stages = (Stage("passes", tuple(passes)),)
    elif stages is None:
        stages = stages_for(target, threads=threads, blocks=blocks)
    if dump_dir is None and timings is None:
        elements = tuple(p for stage in stages for p in stage.passes)
        if _pass_runner.available():
            # Without the GIL: kernels compiled on several threads overlap.
            segments = _segments(elements)
            for i, segment in enumerate(segments):
                _pass_runner.run_pipeline(module, pipeline_string(segment),
                                          verify=i == len(segments) - 1)
        else:
            PassManager.parse(pipeline_string(elements), module.context).run(module.operation)
        return
    pattern = re.compile(dump_regex)
    if dump_dir is not None:
        dump_dir = Path(dump_dir)
        dump_dir.mkdir(parents=True, exist_ok=True)
        (dump_dir / "00.input.mlir").write_text(str(module))
    i = 0
    for stage in stages:
        stage_start = time.perf_counter()
        for element in stage.passes:
            i += 1
            name = pass_name(element)
            start = time.perf_counter()
            PassManager.parse(pipeline_string((element,)), module.context).run(
                module.operation)
            if timings is not None:
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
            if dump_dir is not None and pattern.search(name):
                (dump_dir / f"{i:02d}.{name}.mlir").write_text(str(module))
        if timings is not None:
            key = f"stage:{stage.name}"
            timings[key] = timings.get(key, 0.0) + time.perf_counter() - stage_start
        if dump_dir is not None and pattern.search(stage.name):
            (dump_dir / f"stage.{stage.name}.mlir").write_text(str(module))

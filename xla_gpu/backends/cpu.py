"""The cpu target: an emitted kernel, with its GPU launch dimensions, run
on the host.

    from xla_gpu.backends import cpu
    kernel = cpu.compile_module(open("examples/gelu.mlir").read(),
                                threads=128, blocks=24576)
    kernel.run([x, out])            # numpy arrays: inputs, then outputs

The module goes through the shared pipeline and the cpu tail
(`xla_gpu.pipeline.passes_for("cpu")`): `xla-emulate-grid` turns the grid
into loops (blocks one after the other; in a block, one loop over the
threads per phase between barriers; shared memory a per-block buffer),
`xla-lower-to-host` lowers to the LLVM dialect with libm calls, and
MLIR's ExecutionEngine compiles it to machine code (opt_level 3 by
default). Nothing is interpreted.

The entry points of a kernel `k` (C ABI):
    void k_host(void **args)      the whole grid; args[i] is the data
                                  pointer of kernel argument i
    void k_host_blocks(void *a0, ..., void *aN-1, int64_t first, int64_t end)
                                  blocks [first, end) only
`shared_object(module, "k")` links them into a shared object that
`xla_gpu.runtime` loads with ctypes alone (no MLIR needed there): the
machine code the ExecutionEngine would make (k_host calls k_host_blocks,
which is not inlined: the grid's body is compiled once), made by LLVM's C
API without a JIT session and without the GIL (the kernels of a program
compile side by side), linked by the linker the C compiler driver runs,
called directly (the same bytes as `cc -shared ... -lm`). A program's
kernels are compiled to objects (`host_object`) and linked together
(`link_groups`, `link_objects`): one linker run, one library to load, for
many kernels. Before that, a program's kernels are translated into shared
LLVM modules (`HostBatcher`), each optimized and compiled by one LLVM run,
whose fixed cost a small kernel no longer pays alone.

Arguments are raw pointers to the data of C-contiguous numpy arrays in the
entry's argument order after `xla-merge-pointers` (arguments sharing an
`xla.slice_index` are passed once): parameters, then outputs, which the
kernel writes in place. bf16 is `ml_dtypes.bfloat16`, pred is `bool` (one
byte; the kernels store i1 as i8).

One host thread runs the grid; `run(..., workers=N)` splits the blocks
among N threads (the JIT-compiled code runs without the GIL; every call has
its own shared-memory and per-thread buffers on its stack).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from mlir import ir as _ir
from mlir.execution_engine import ExecutionEngine

from .._ctypes_arrays import array_of
from .. import ir as _xla_ir
from .. import pipeline as _pipeline
from .._trace import complete
from . import llvm_options

__all__ = ["compile_module", "JitKernel", "shared_object", "host_object", "link_objects",
           "link_groups", "HostObject", "HostCompileError", "HostBatcher", "HostPending",
           "HOST_BATCH_LINES"]


class HostCompileError(RuntimeError):
    """The JIT or the linker failed; the message has the tool's output."""

_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _worker_pool() -> ThreadPoolExecutor:
    """The threads that run block ranges of `JitKernel.run(workers=N)`,
    made once per process (one per core; the JIT-compiled code runs
    without the GIL)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max(os.cpu_count() or 1, 1),
                                       thread_name_prefix="xla_gpu_host")
        return _POOL


def _element_bytes(element: _ir.Type) -> int | None:
    if isinstance(element, (_ir.IntegerType, _ir.FloatType)):
        return max(1, (element.width + 7) // 8)   # i1 takes a byte
    if isinstance(element, _ir.IndexType):
        return 8
    return None


def _argument_bytes(func: _ir.Operation) -> list[int | None] | None:
    """Bytes of each kernel argument after xla-merge-pointers (arguments
    with an xla.slice_index seen before are dropped), None where unknown."""
    try:
        types = _ir.FunctionType(_ir.TypeAttr(func.attributes["function_type"]).value).inputs
        attrs = (list(_ir.ArrayAttr(func.attributes["arg_attrs"]))
                 if "arg_attrs" in func.attributes else [None] * len(types))
    except (KeyError, ValueError, TypeError):
        return None
    sizes: list[int | None] = []
    seen: set[str] = set()
    for arg_type, arg_attrs in zip(types, attrs):
        if arg_attrs is not None:
            d = _ir.DictAttr(arg_attrs)
            if "xla.slice_index" in d:
                key = str(d["xla.slice_index"])
                if key in seen:
                    continue
                seen.add(key)
        if not isinstance(arg_type, _ir.RankedTensorType):
            sizes.append(None)
            continue
        tensor = arg_type
        width = _element_bytes(tensor.element_type)
        sizes.append(None if width is None or not tensor.has_static_shape
                     else width * math.prod(tensor.shape))
    return sizes


def _find(module: _ir.Module, op_name: str, symbol: str) -> _ir.Operation | None:
    for op in module.body.operations:
        if op.operation.name == op_name and \
                _ir.StringAttr(op.attributes["sym_name"]).value == symbol:
            return op.operation
    return None


@dataclass
class JitKernel:
    """A kernel JIT-compiled in this process by MLIR's ExecutionEngine (the
    in-process form; programs and saved kernels load shared objects through
    `xla_gpu.runtime.HostKernel`). `run(buffers)` runs the whole grid."""
    entry: str
    threads: int
    blocks: int
    num_args: int
    arg_nbytes: list[int | None] | None
    engine: ExecutionEngine = field(repr=False)
    llvm_ir: str = field(repr=False)      # the LLVM-dialect MLIR it came from
    compile_seconds: float = 0.0
    _grid: object = field(repr=False, default=None)
    _blocks_fn: object = field(repr=False, default=None)

    def _pointers(self, buffers: Sequence) -> list[int]:
        import numpy as np
        if len(buffers) != self.num_args:
            raise ValueError(f"@{self.entry} takes {self.num_args} buffers, "
                             f"got {len(buffers)}")
        pointers = []
        for i, buffer in enumerate(buffers):
            if not isinstance(buffer, np.ndarray):
                raise TypeError(f"buffer #{i} is a {type(buffer).__name__}, "
                                "not a numpy array")
            if not buffer.flags.c_contiguous:
                raise ValueError(f"buffer #{i} is not C-contiguous")
            expected = self.arg_nbytes[i] if self.arg_nbytes else None
            if expected is not None and buffer.nbytes != expected:
                raise ValueError(f"buffer #{i} has {buffer.nbytes} bytes, "
                                 f"@{self.entry} expects {expected}")
            pointers.append(buffer.ctypes.data)
        return pointers

    def run(self, buffers: Sequence, *, workers: int = 1) -> None:
        """Runs the grid on `buffers` (inputs, then outputs, written in
        place). `workers` > 1 splits the blocks among that many threads."""
        self.launch(self._pointers(buffers), workers=workers)

    def launch(self, pointers: Sequence[int], *, workers: int = 1) -> None:
        """`run` on the buffers' data addresses (checked by the caller)."""
        if workers <= 1 or self.blocks <= 1:
            # _mlir_ciface_k_host(void **args), called through its packed
            # wrapper: one slot, pointing to `args`.
            args = array_of(ctypes.c_void_p, pointers)
            slot = ctypes.c_void_p(ctypes.addressof(args))
            self._grid(array_of(ctypes.c_void_p, [ctypes.addressof(slot)]))
            return
        workers = min(workers, self.blocks)
        bounds = [self.blocks * w // workers for w in range(workers + 1)]

        def run_range(first: int, end: int) -> None:
            # _mlir_ciface_k_host_blocks(a0, ..., first, end), packed: one
            # slot per argument, pointing to its value.
            slots: list = [ctypes.c_void_p(p) for p in pointers]
            slots += [ctypes.c_int64(first), ctypes.c_int64(end)]
            packed = array_of(ctypes.c_void_p, [ctypes.addressof(s) for s in slots])
            self._blocks_fn(packed)

        # The first range runs on this thread, the others on the shared
        # pool (a pool per call costs more than a small kernel's run).
        futures = [_worker_pool().submit(run_range, bounds[w], bounds[w + 1])
                   for w in range(1, workers)]
        try:
            run_range(bounds[0], bounds[1])
        finally:
            for future in futures:
                future.result()

    __call__ = run


def compile_module(module_or_text: _ir.Module | str, *, entry: str = "main",
                   threads: int | None = None, blocks: int | None = None,
                   context: _ir.Context | None = None, opt_level: int = 3,
                   shared_libs: Sequence[str] = (),
                   dump_dir: str | Path | None = None,
                   timings: dict[str, float] | None = None) -> JitKernel:
    """Compiles the emitted kernel `entry` of `module_or_text` (an
    mlir.ir.Module, left unchanged, or its text) for the host. `threads` per
    block and `blocks` are the launch dimensions (None: from the xla.range
    of gpu.thread_id / gpu.block_id). Raises mlir.ir.MLIRError when a pass
    fails."""
    if isinstance(module_or_text, _ir.Module):
        context = context or module_or_text.context
        text = str(module_or_text)
    else:
        text = module_or_text
    context = context or _xla_ir.Context()
    module = _ir.Module.parse(text, context)
    func = _find(module, "func.func", entry)
    if func is None:
        raise ValueError(f"no func.func @{entry} in the module")
    arg_nbytes = _argument_bytes(func)
    if not any("xla.entry" in op.attributes for op in module.body.operations):
        func.attributes["xla.entry"] = _ir.UnitAttr.get(context)

    _pipeline.run(module, target="cpu", threads=threads, blocks=blocks,
                  dump_dir=dump_dir, timings=timings)
    host = _find(module, "llvm.func", f"{entry}_host")
    if host is None:
        raise HostCompileError(f"the cpu pipeline produced no @{entry}_host")
    num_args = _ir.IntegerAttr(host.attributes["xla.num_args"]).value
    threads = _ir.IntegerAttr(host.attributes["xla.threads_per_block"]).value
    blocks = _ir.IntegerAttr(host.attributes["xla.blocks"]).value
    if arg_nbytes is not None and len(arg_nbytes) != num_args:
        arg_nbytes = None
    llvm_ir = str(module)
    _one_body(module, entry)
    _inline_element_functions(module, entry)

    start = time.perf_counter()
    engine = ExecutionEngine(module, opt_level=opt_level,
                             shared_libs=list(shared_libs),
                             enable_object_dump=False)
    # Looking the functions up compiles them.
    grid = engine.raw_lookup(f"_mlir_ciface_{entry}_host")
    blocks_fn = engine.raw_lookup(f"_mlir_ciface_{entry}_host_blocks")
    if not grid or not blocks_fn:
        raise HostCompileError(f"the JIT has no @{entry}_host (unresolved symbols?)")
    seconds = time.perf_counter() - start
    return JitKernel(entry=entry, threads=threads, blocks=blocks,
                      num_args=num_args, arg_nbytes=arg_nbytes, engine=engine,
                      llvm_ir=llvm_ir, compile_seconds=seconds,
                      _grid=_PACKED(grid), _blocks_fn=_PACKED(blocks_fn))


def from_lowered(llvm_text: str, *, entry: str = "main",
                 context: _ir.Context | None = None, opt_level: int = 3,
                 shared_libs: Sequence[str] = ()) -> JitKernel:
    """JIT-compiles `JitKernel.llvm_ir` again (a compile-cache hit: no
    emission and no pipeline, only the ExecutionEngine)."""
    context = context or _xla_ir.Context()
    module = _ir.Module.parse(llvm_text, context)
    host = _find(module, "llvm.func", f"{entry}_host")
    if host is None:
        raise ValueError(f"no llvm.func @{entry}_host in the lowered module")
    num_args = (_ir.IntegerAttr(host.attributes["xla.num_args"]).value
                if "xla.num_args" in host.attributes
                else len(host.regions[0].blocks[0].arguments))
    threads = _ir.IntegerAttr(host.attributes["xla.threads_per_block"]).value
    blocks = _ir.IntegerAttr(host.attributes["xla.blocks"]).value
    _one_body(module, entry)
    _inline_element_functions(module, entry)
    start = time.perf_counter()
    engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=list(shared_libs),
                             enable_object_dump=False)
    grid = engine.raw_lookup(f"_mlir_ciface_{entry}_host")
    blocks_fn = engine.raw_lookup(f"_mlir_ciface_{entry}_host_blocks")
    if not grid or not blocks_fn:
        raise HostCompileError(f"the JIT has no @{entry}_host (unresolved symbols?)")
    return JitKernel(entry=entry, threads=threads, blocks=blocks, num_args=num_args,
                      arg_nbytes=None, engine=engine, llvm_ir=llvm_text,
                      compile_seconds=time.perf_counter() - start,
                      _grid=_PACKED(grid), _blocks_fn=_PACKED(blocks_fn))


def _one_body(module, entry: str) -> None:
    """Marks @<entry>_host_blocks and @<entry>_host `no_inline`, in place.
    Every entry point of a host kernel calls the grid's body: @k_host
    calls @k_host_blocks (or its serial copy), the C-interface wrappers
    and the JIT's packed wrappers call both. Inlined, a small body was
    optimized and compiled once per caller (eight copies: 3-4 times the
    LLVM time of a small kernel); not inlined, once. The body's code is
    the same either way (only @k_host's constant block range is no
    longer folded into it: one call more per launch)."""
    body = module.body
    names = (f"{entry}_host", f"{entry}_host_blocks")
    for op in body.operations:
        if op.operation.name == "llvm.func" and \
                _ir.StringAttr(op.attributes["sym_name"]).value in names:
            op.attributes["no_inline"] = _ir.UnitAttr.get(op.operation.context)


# A kernel's element functions (the partitioned fusion's subgraphs with more
# than one caller: MLIR's inliner inlines only those with one) are called
# from inside the emulated thread loops. A call there keeps LLVM's loop
# vectorizer off the loop, and LLVM's own inliner declines most of them
# (many arguments, a body past its threshold): a GroupNorm backward's
# column reduction, whose input fuses an average-pool backward
# (pad + reduce-window + select), ran one scalar call per element, 30x
# slower than inlined and vectorized. So they are inlined always, up to
# this many LLVM operations for a function with all its callees inlined
# (counted as a tree: a shared callee counts at each call; past the
# budget a function stays a call and LLVM decides, as before). No fast-math
# flag is added: every float operation stays, in its order; only the
# `contract` multiply-adds of the host's polynomial math
# (xla-approximate-host-math) may fuse differently once vectorized (an ulp
# or so, within the target's tolerances).
HOST_INLINE_MAX_OPS = 4000


def _inlined_size(name: str, own: dict[str, int], calls: dict[str, list[str]],
                  sizes: dict[str, float], active: frozenset = frozenset()) -> float:
    """The LLVM operations of function `name` with its callees inlined
    (`own` operations and `calls` per function; `sizes` memoizes), counted
    as a tree, stopping once past HOST_INLINE_MAX_OPS; infinite for a
    recursive one. (A module function: a recursive closure would be a
    reference cycle left for the collector on every compile.)"""
    if name in sizes:
        return sizes[name]
    if name in active:            # recursion: never inlined always
        return math.inf
    total = float(own[name])
    for callee in calls[name]:
        if callee in own:
            total += _inlined_size(callee, own, calls, sizes, active | {name})
        if total > HOST_INLINE_MAX_OPS:
            break
    sizes[name] = total
    return total


def _inline_element_functions(module, entry: str) -> None:
    """Marks the element functions of host module `module` (every defined
    function but the grid's entries @<entry>_host*, and the C-interface
    wrappers) `always_inline` with internal linkage (dropped once
    inlined), in place, when their fully inlined size is within
    HOST_INLINE_MAX_OPS; their loads and stores join the thread loops'
    access groups. See HOST_INLINE_MAX_OPS."""
    functions: dict[str, object] = {}
    for op in module.body.operations:
        if op.operation.name != "llvm.func":
            continue
        name = _ir.StringAttr(op.attributes["sym_name"]).value
        if name.startswith((f"{entry}_host", "_mlir_ciface_")) or not op.regions[0].blocks:
            continue
        linkage = str(op.attributes["linkage"]) if "linkage" in op.attributes else ""
        if "no_inline" in op.attributes or not any(
                kind in linkage for kind in ("external", "internal", "private")) and linkage:
            continue      # weak and other linkages: another object may define it
        functions[name] = op
    if not functions:
        return
    own: dict[str, int] = {}
    calls: dict[str, list[str]] = {}
    for name, op in functions.items():
        count, callees = 0, []

        def visit(inner, callees=callees):
            nonlocal count
            count += 1
            if inner.name == "llvm.call" and "callee" in inner.attributes:
                callees.append(_ir.FlatSymbolRefAttr(inner.attributes["callee"]).value)
            return _ir.WalkResult.ADVANCE

        op.operation.walk(visit)
        own[name], calls[name] = count, callees
    sizes: dict[str, float] = {}
    context = module.operation.context
    internal = _ir.Attribute.parse("#llvm.linkage<internal>", context)
    inlined = [op for name, op in functions.items()
               if _inlined_size(name, own, calls, sizes) <= HOST_INLINE_MAX_OPS]
    if not inlined:
        return
    for op in inlined:
        op.attributes["always_inline"] = _ir.UnitAttr.get(context)
        op.attributes["linkage"] = internal
    # The emulated thread loops are marked parallel (xla-emulate-grid: every
    # load and store in them joins the loop's access group, which the loop's
    # annotation names), but a function's loads and stores inlined into one
    # have no group: LLVM then falls back on run-time overlap checks, which
    # fail on the kernels' computed addresses ("cannot identify array
    # bounds"), and the loop stays scalar (an LSTM cell's gates). So their
    # loads and stores join every group of the module's loops: in the loop
    # a copy is inlined into, it is one of that loop's threads' accesses
    # (what the grid emulation marks), and a group names no other loop.
    groups: dict[str, object] = {}
    for op in module.body.operations:
        if op.operation.name != "llvm.func":
            continue

        def collect(inner):
            if inner.name in ("llvm.load", "llvm.store") and "access_groups" in inner.attributes:
                for group in _ir.ArrayAttr(inner.attributes["access_groups"]):
                    groups.setdefault(str(group), group)
            return _ir.WalkResult.ADVANCE

        op.operation.walk(collect)
    if not groups:
        return

    def join(inner):
        if inner.name in ("llvm.load", "llvm.store"):
            own = list(_ir.ArrayAttr(inner.attributes["access_groups"])) \
                if "access_groups" in inner.attributes else []
            names = {str(g) for g in own}
            own += [g for key, g in groups.items() if key not in names]
            inner.attributes["access_groups"] = _ir.ArrayAttr.get(own, context)
        return _ir.WalkResult.ADVANCE

    for op in inlined:
        op.operation.walk(join)


# -- the ExecutionEngine through MLIR's C API -------------------------------------

@functools.lru_cache(maxsize=None)
def _engine_api():
    """The bindings' library with the ExecutionEngine's C API typed for
    ctypes, which lets go of the GIL during a call (the bindings'
    ExecutionEngine holds it while LLVM optimizes and compiles: the
    kernels of a program built on several threads would take turns).
    None when the library or a function is missing."""
    from .. import _pass_runner
    from .._native import _Handle, _StringRef
    lib = _pass_runner.bindings_library()
    if lib is None or not _pass_runner.available():
        return None
    try:
        prototypes = {
            "mlirExecutionEngineCreate": (_Handle, [_Handle, ctypes.c_int, ctypes.c_int,
                                                    ctypes.POINTER(_StringRef), ctypes.c_bool,
                                                    ctypes.c_bool]),
            "mlirExecutionEngineDestroy": (None, [_Handle]),
            "mlirExecutionEngineLookup": (ctypes.c_void_p, [_Handle, _StringRef]),
            "mlirExecutionEngineDumpToObjectFile": (None, [_Handle, _StringRef]),
            "mlirModuleFromOperation": (_Handle, [_Handle]),
        }
        functions = {}
        for name, (restype, argtypes) in prototypes.items():
            # Private function objects: other users of the library set
            # their own prototypes on the shared CDLL.
            fn = ctypes.CFUNCTYPE(restype, *argtypes)((name, lib))
            functions[name] = fn
        return functions
    except AttributeError:
        return None


def _object_code(module_op, symbol: str, pipeline: HostPipeline) -> bytes:
    """The ELF object of LLVM-dialect `module_op` (a builtin.module, left as
    it is): the code MLIR's ExecutionEngine makes of it (position
    independent, for this machine's CPU), made by LLVM's C API without the
    JIT around it, as `pipeline` says, where it can (`_llvm_object`), else
    by the engine (`_engine_object`, which looks `symbol` up to compile,
    and runs default<O`pipeline.opt_level`> with its unrollers and
    vectorizers)."""
    if _llvm_api() is None:
        return _engine_object(module_op, symbol, pipeline.opt_level)
    return _llvm_object(module_op, pipeline)


# Whether LLVM's loop unrollers (full and partial) run on a kernel's host
# code, by the emitter that emitted it. The grid emulation wraps every
# kernel in loops with small constant trip counts (threads of a block, a
# thread's elements, a tile's rows): in the kernels of the reduction and
# transpose emitters (the most of a training step's LLVM time) the
# unrollers made LLVM's optimization and code generation take 1.6-1.9
# times as long, for run times within the measurements' noise. The
# loop-like emitters' kernels are cheap to compile either way and run up
# to twice as fast unrolled (an LSTM step's slices and updates), as do the
# tiled GEMM emitter's inner products. A GEMM kernel whose host module is
# larger than HOST_LOOP_UNROLLING_MAX_LINES (a long fused prologue or
# epilogue, which the unrollers copy with the tile loops) is not unrolled
# either: DP-SGD's per-example logits (2,100 lines) took 4 times the LLVM
# time unrolled. Unrolling changes no result: without fast-math flags
# LLVM keeps every float operation and its order.
HOST_LOOP_UNROLLING = False
HOST_LOOP_UNROLLING_EMITTERS = frozenset({"gemm", "loop", "concatenate", "input_slices",
                                          "in_place_dynamic_update_slice"})
HOST_LOOP_UNROLLING_MAX_LINES = 1200


def unrolls_loops(emitter: str = "", host_lines: int = 0) -> bool:
    """Whether the host code of a kernel from `emitter` ("" when not
    known: a kernel compiled from MLIR text), whose LLVM-dialect module
    prints as `host_lines` lines, goes through LLVM's loop unrollers
    (`HOST_LOOP_UNROLLING`)."""
    if HOST_LOOP_UNROLLING or not emitter:
        return True
    if emitter == "gemm":
        return host_lines <= HOST_LOOP_UNROLLING_MAX_LINES
    return emitter in HOST_LOOP_UNROLLING_EMITTERS


# Cold kernels: those doing so little work (`kernel_compiler.kernel_work`:
# about one unit per element an instruction of the fusion computes, one
# per multiply-add of a dot) that their run time is a few microseconds
# whatever LLVM makes of them, compiled by a cheaper pipeline, as XLA:CPU
# compiles its cold code. The grid emulation gives a tiny kernel the same
# loops as a large one, with small constant trip counts, which the O3
# pipeline unrolls fully and vectorizes: a threefry RNG kernel over ten
# elements took 0.13 s of LLVM at O3, 0.013 s at O1. O1 without unrollers
# and vectorizers took 25-65% less LLVM time than O3 on the five real
# models' cold kernels (O2 without them saved as much on loop kernels but
# nothing on reductions, which O3 does not unroll either), for the same
# results and per-kernel run times within the measurements' noise up to
# 16K units of work; above that the scalar code of small GEMM tiles and
# reductions started to show (tens of microseconds a kernel).
HOST_COLD_WORK = 1 << 14
HOST_COLD_OPT_LEVEL = 1
HOST_COLD_UNROLL_LOOPS = False
HOST_COLD_VECTORIZE = False

# Tiny kernels (the cold kernels doing the least work: what the small
# programs of a test suite going through the PJRT plugin are made of) skip
# most of even the O1 pipeline, whose loop passes (loop-load elimination,
# induction-variable simplification, the full unroller: 60% of its time)
# take 5 ms on a reduction over 12 elements, and get code generation
# without optimization (fast instruction selection and register
# allocation: a quarter of the default level's time). What is left folds
# the emulated grid's constants and cleans the control flow. Measured on
# the cpu target against O1 (medians of 200 runs): up to 2K units of work
# each kernel ran 0.3-6 us slower, at 4K a row reduction 66 us slower
# (16 -> 82 us), which is why this stops at 2K; the LLVM time of a small
# program's kernel went from 6-12 ms to 2-4 ms.
HOST_TINY_WORK = 1 << 11
HOST_TINY_PASSES = "function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg)"
HOST_TINY_CODEGEN_LEVEL = 0


@dataclass(frozen=True)
class HostPipeline:
    """How LLVM compiles a kernel's host code: the default<O`opt_level`>
    pipeline, with or without its loop unrollers and its vectorizers, or
    the textual pipeline `passes` instead; code generation at LLVM's
    `codegen_level` (LLVMCodeGenOptLevel: 0 none, 2 default); `cold`:
    chosen for a cold kernel."""
    opt_level: int = 3
    unroll_loops: bool = True
    vectorize: bool = True
    cold: bool = False
    passes: str = ""
    codegen_level: int = 2

    @property
    def pass_pipeline(self) -> str:
        """What LLVMRunPasses runs."""
        return self.passes or f"default<O{self.opt_level}>"

    def describe(self) -> str:
        if self.passes:
            text = f"LLVM passes {self.passes}"
        else:
            left_out = [what for what, kept in (("loop unrolling", self.unroll_loops),
                                                ("vectorization", self.vectorize)) if not kept]
            text = f"LLVM default<O{self.opt_level}>" + \
                (f" without {' or '.join(left_out)}" if left_out else "")
        if self.codegen_level != 2:
            text += f", code generation at level {self.codegen_level}"
        return text


def host_pipeline(emitter: str = "", host_lines: int = 0,
                  work: int | None = None) -> HostPipeline:
    """The LLVM pipeline for the host code of a kernel from `emitter` ("":
    not known), whose LLVM-dialect module prints as `host_lines` lines and
    which does `work` (None: not known, never cold). A pure function of
    its arguments, which the kernel's HLO decides: a cached kernel was
    compiled by the pipeline this would choose for it."""
    if work is not None and work <= HOST_TINY_WORK:
        return HostPipeline(0, False, False, cold=True, passes=HOST_TINY_PASSES,
                            codegen_level=HOST_TINY_CODEGEN_LEVEL)
    if work is not None and work <= HOST_COLD_WORK:
        return HostPipeline(HOST_COLD_OPT_LEVEL, HOST_COLD_UNROLL_LOOPS,
                            HOST_COLD_VECTORIZE, cold=True)
    return HostPipeline(3, unrolls_loops(emitter, host_lines), True)


# Compiler-rt helpers LLVM's code generation may call for some float
# conversions (f32 -> bf16: __truncsfbf2) that the system's libgcc may not
# have (gcc 12's has none), as LLVM-dialect definitions (weak, hidden:
# linked into the kernels that call them, never exported).
_HOST_BUILTINS = {
    # f32 -> bf16, rounding to nearest even; a NaN stays a (quiet) NaN.
    "__truncsfbf2": """
llvm.func weak hidden @__truncsfbf2(%x: f32) -> bf16 {
  %i = llvm.bitcast %x : f32 to i32
  %c16 = llvm.mlir.constant(16 : i32) : i32
  %c1 = llvm.mlir.constant(1 : i32) : i32
  %half = llvm.mlir.constant(32767 : i32) : i32
  %quiet = llvm.mlir.constant(64 : i32) : i32
  %high = llvm.lshr %i, %c16 : i32
  %odd = llvm.and %high, %c1 : i32
  %bias = llvm.add %odd, %half : i32
  %rounded = llvm.add %i, %bias : i32
  %kept = llvm.lshr %rounded, %c16 : i32
  %nan_bits = llvm.or %high, %quiet : i32
  %nan = llvm.fcmp "uno" %x, %x : f32
  %bits = llvm.select %nan, %nan_bits, %kept : i1, i32
  %short = llvm.trunc %bits : i32 to i16
  %result = llvm.bitcast %short : i16 to bf16
  llvm.return %result : bf16
}
""",
}


class _LlvmApi:
    """LLVM's C API, from the library the MLIR bindings link (the LLVM that
    translates their modules and that their ExecutionEngine runs), typed
    for ctypes (which lets go of the GIL during each call), and the host
    target as the ExecutionEngine's C API describes it."""

    _PROTOTYPES = {
        "mlirTranslateModuleToLLVMIR": ("p", ["h", "p"]),
        "LLVMContextCreate": ("p", []),
        "LLVMContextDispose": (None, ["p"]),
        "LLVMDisposeModule": (None, ["p"]),
        "LLVMGetDefaultTargetTriple": ("p", []),
        "LLVMNormalizeTargetTriple": ("p", ["s"]),
        "LLVMGetHostCPUName": ("p", []),
        "LLVMGetHostCPUFeatures": ("p", []),
        "LLVMDisposeMessage": (None, ["p"]),
        "LLVMGetTargetFromTriple": ("i", ["s", "pp", "pp"]),
        "LLVMCreateTargetMachine": ("p", ["p", "s", "s", "s", "i", "i", "i"]),
        "LLVMDisposeTargetMachine": (None, ["p"]),
        "LLVMCreateTargetDataLayout": ("p", ["p"]),
        "LLVMDisposeTargetData": (None, ["p"]),
        "LLVMSetModuleDataLayout": (None, ["p", "p"]),
        "LLVMSetTarget": (None, ["p", "s"]),
        "LLVMCreatePassBuilderOptions": ("p", []),
        "LLVMDisposePassBuilderOptions": (None, ["p"]),
        "LLVMPassBuilderOptionsSetLoopUnrolling": (None, ["p", "i"]),
        "LLVMPassBuilderOptionsSetLoopInterleaving": (None, ["p", "i"]),
        "LLVMPassBuilderOptionsSetLoopVectorization": (None, ["p", "i"]),
        "LLVMPassBuilderOptionsSetSLPVectorization": (None, ["p", "i"]),
        "LLVMRunPasses": ("p", ["p", "s", "p", "p"]),
        "LLVMGetErrorMessage": ("p", ["p"]),
        "LLVMDisposeErrorMessage": (None, ["p"]),
        "LLVMTargetMachineEmitToMemoryBuffer": ("i", ["p", "p", "i", "pp", "pp"]),
        "LLVMGetBufferStart": ("p", ["p"]),
        "LLVMGetBufferSize": ("z", ["p"]),
        "LLVMDisposeMemoryBuffer": (None, ["p"]),
    }
    _BATCH_PROTOTYPES = {
        "LLVMLinkModules2": ("i", ["p", "p"]),
        "LLVMCloneModule": ("p", ["p"]),
        "LLVMContextSetDiagnosticHandler": (None, ["p", "p", "p"]),
        "LLVMGetDiagInfoDescription": ("p", ["p"]),
        "LLVMGetDiagInfoSeverity": ("i", ["p"]),
    }
    # The machine -> (LLVMInitialize<target>..., the triple's architecture).
    _ARCH = {"x86_64": ("X86", b"x86_64"), "amd64": ("X86", b"x86_64"),
             "aarch64": ("AArch64", b"aarch64"), "arm64": ("AArch64", b"aarch64")}

    def __init__(self, lib):
        import platform

        from .._native import _Handle
        kinds = {"p": ctypes.c_void_p, "h": _Handle, "s": ctypes.c_char_p,
                 "i": ctypes.c_int, "z": ctypes.c_size_t,
                 "pp": ctypes.POINTER(ctypes.c_void_p)}
        for name, (result, params) in self._PROTOTYPES.items():
            # Private function objects (other users of the library type
            # its functions on the shared CDLL); LLVM's functions are found
            # through the bindings' library (dlsym searches what it links).
            prototype = ctypes.CFUNCTYPE(kinds[result] if result else None,
                                         *[kinds[p] for p in params])
            setattr(self, name, prototype((name, lib)))
        # What batching kernels into one LLVM module needs (`HostBatcher`):
        # without it every kernel is compiled alone, as before.
        try:
            for name, (result, params) in self._BATCH_PROTOTYPES.items():
                prototype = ctypes.CFUNCTYPE(kinds[result] if result else None,
                                             *[kinds[p] for p in params])
                setattr(self, name, prototype((name, lib)))
            self.batches = True
        except AttributeError:
            self.batches = False
        arch, triple_arch = self._ARCH.get(platform.machine().lower(), (None, None))
        if arch is None:
            raise AttributeError(f"no LLVM target for {platform.machine()}")
        for part in ("TargetInfo", "Target", "TargetMC", "AsmPrinter"):
            ctypes.CFUNCTYPE(None)((f"LLVMInitialize{arch}{part}", lib))()
        # The host as JITTargetMachineBuilder::detectHost sees it (the
        # default triple is the process's in a native LLVM; a cross one
        # is left to the ExecutionEngine).
        default = self._message(self.LLVMGetDefaultTargetTriple())
        self.triple = self._message(self.LLVMNormalizeTargetTriple(default))
        if not self.triple.startswith(triple_arch + b"-"):
            raise AttributeError(f"LLVM's default triple {self.triple!r} is not this host's")
        self.cpu = self._message(self.LLVMGetHostCPUName())
        self.features = self._message(self.LLVMGetHostCPUFeatures())
        self.target = ctypes.c_void_p()
        error = ctypes.c_void_p()
        if self.LLVMGetTargetFromTriple(self.triple, ctypes.byref(self.target),
                                        ctypes.byref(error)):
            raise AttributeError(self._message(error.value).decode(errors="replace"))
        self._machines: dict[int, list[int]] = {}     # by code generation level
        self._lock = threading.Lock()

    def _message(self, pointer) -> bytes:
        text = ctypes.string_at(pointer) if pointer else b""
        if pointer:
            self.LLVMDisposeMessage(pointer)
        return text

    def take_machine(self, codegen_level: int = 2) -> int:
        """A target machine no other thread uses (LLVM's are not thread
        safe): the ExecutionEngine C API's, position independent code at
        `codegen_level` (the default: the level the engine compiles at
        whatever opt_level the IR pipeline runs at), the JIT's code
        model."""
        with self._lock:
            pool = self._machines.get(codegen_level)
            if pool:
                return pool.pop()
        # LLVMRelocPIC, LLVMCodeModelJITDefault
        machine = self.LLVMCreateTargetMachine(self.target, self.triple, self.cpu,
                                               self.features, codegen_level, 2, 1)
        if not machine:
            raise HostCompileError("LLVM could not make a target machine for "
                                   f"{self.triple.decode()} ({self.cpu.decode()})")
        return machine

    def give_machine(self, machine: int, codegen_level: int = 2) -> None:
        with self._lock:
            self._machines.setdefault(codegen_level, []).append(machine)


# Whether LLVM's loop strength reduction runs in the host code's code
# generation. The thread loops' addresses are affine functions of the loop
# counters (one per access of every fused input, after xla-lower-to-host
# computes them in i64), and LSR searched formulae for all of them: 40%
# of code generation's time on a GPT training step's kernels (0.6 of 1.4
# CPU-s), for step times within the measurements' noise on the real-model
# bench (x86's addressing modes take base + index * scale as they are).
# LLVM has this switch as a command-line option only, of the LLVM library
# the MLIR bindings load: `llvm_options` sets it for the process until the
# first NVPTX code generation in it, which needs the reduction.
HOST_LOOP_STRENGTH_REDUCTION = False


@functools.lru_cache(maxsize=None)
def _llvm_api() -> _LlvmApi | None:
    """LLVM's C API and the host target, None when the bindings' library
    lacks a function it needs or the host's architecture is not known
    here (then the ExecutionEngine compiles)."""
    from .. import _pass_runner
    lib = _pass_runner.bindings_library()
    if lib is None or not _pass_runner.available():
        return None
    try:
        api = _LlvmApi(lib)
    except AttributeError:
        return None
    if not HOST_LOOP_STRENGTH_REDUCTION:
        llvm_options.host_codegen_without_lsr(lib)
    return api


def _llvm_object(module_op, pipeline: HostPipeline) -> bytes:
    """`_object_code` through LLVM's C API: what the ExecutionEngine does
    to a module (translation, the host's triple and data layout, LLVM's
    default<O`opt_level`> pipeline tuned as MLIR's optimizing transformer
    tunes it, then codegen by the target machine it makes), without the
    JIT session, its packed wrappers and its in-memory linking: the same
    machine code for the module's own functions, in less time; or the
    pipeline's own passes and code generation level. Without
    `unroll_loops` LLVM's loop unrollers stay out; without `vectorize` the
    options ask its loop vectorizer (and interleaving) and SLP vectorizer
    to stay out. (Measured on this LLVM 22: at O1, where cold kernels go,
    the loop vectorizer takes only loops whose metadata asks for it and
    SLP does not run, with the option either way, so those kernels are
    not vectorized; at O2 and O3 the two vectorizer options leave the
    objects byte for byte as they were, which is why no hot kernel is
    given `vectorize=False`.)"""
    api = _llvm_api()
    context = api.LLVMContextCreate()
    module = None
    try:
        module = _translate(api, module_op, context)
        return _emit_object(api, module, pipeline)
    finally:
        if module:
            api.LLVMDisposeModule(module)
        api.LLVMContextDispose(context)


def _translate(api: _LlvmApi, module_op, context) -> int:
    """LLVM-dialect `module_op` translated to an LLVM module in LLVM
    context `context`, with the host's triple and data layout (in the
    calling thread: `module_op`'s MLIR context is that thread's)."""
    from .. import _pass_runner
    from .._native import to_handle
    with _pass_runner.error_diagnostics(module_op.operation.context) as diagnostics:
        module = api.mlirTranslateModuleToLLVMIR(to_handle(module_op.operation), context)
    if not module:
        raise HostCompileError(_pass_runner.mlir_error(
            "the module could not be translated to LLVM IR", diagnostics).args[0])
    api.LLVMSetTarget(module, api.triple)
    try:
        machine = api.take_machine()
    except HostCompileError:
        api.LLVMDisposeModule(module)
        raise
    try:
        layout = api.LLVMCreateTargetDataLayout(machine)
        api.LLVMSetModuleDataLayout(module, layout)
        api.LLVMDisposeTargetData(layout)
    finally:
        api.give_machine(machine)
    return module


def _emit_object(api: _LlvmApi, module, pipeline: HostPipeline) -> bytes:
    """LLVM module `module` (left for the caller to dispose) through
    `pipeline`'s passes and code generation: its ELF object."""
    level = pipeline.codegen_level
    machine = api.take_machine(level)
    try:
        options = api.LLVMCreatePassBuilderOptions()
        api.LLVMPassBuilderOptionsSetLoopUnrolling(options, int(pipeline.unroll_loops))
        for setter in (api.LLVMPassBuilderOptionsSetLoopInterleaving,
                       api.LLVMPassBuilderOptionsSetLoopVectorization,
                       api.LLVMPassBuilderOptionsSetSLPVectorization):
            setter(options, int(pipeline.vectorize))
        error = api.LLVMRunPasses(module, pipeline.pass_pipeline.encode(), machine, options)
        api.LLVMDisposePassBuilderOptions(options)
        if error:
            pointer = api.LLVMGetErrorMessage(error)
            text = ctypes.string_at(pointer).decode(errors="replace")
            api.LLVMDisposeErrorMessage(pointer)
            raise HostCompileError(f"LLVM's optimization pipeline failed: {text}")
        buffer, message = ctypes.c_void_p(), ctypes.c_void_p()
        if api.LLVMTargetMachineEmitToMemoryBuffer(machine, module, 1,   # LLVMObjectFile
                                                   ctypes.byref(message),
                                                   ctypes.byref(buffer)):
            text = api._message(message.value).decode(errors="replace")
            raise HostCompileError(f"LLVM's code generation failed: {text}")
        try:
            return ctypes.string_at(api.LLVMGetBufferStart(buffer),
                                    api.LLVMGetBufferSize(buffer))
        finally:
            api.LLVMDisposeMemoryBuffer(buffer)
    finally:
        api.give_machine(machine, level)


def _engine_object(module_op, symbol: str, opt_level: int) -> bytes:
    """The ELF object (position independent, for this machine's CPU) MLIR's
    ExecutionEngine compiles LLVM-dialect `module_op` (a builtin.module,
    left as it is: the engine translates it first) to, with the packed
    wrappers it adds; `symbol` is looked up to compile it. Through the C
    API without the GIL where it can, else through the bindings."""
    from .. import _pass_runner
    from .._native import _StringRef, to_handle
    api = _engine_api()
    with tempfile.TemporaryDirectory(prefix="xla_gpu_host_") as tmp:
        path = os.path.join(tmp, "kernel.o")
        if api is None:
            module = _ir.Module.parse(str(module_op), module_op.operation.context)
            engine = ExecutionEngine(module, opt_level=opt_level, enable_object_dump=True,
                                     enable_pic=True)
            if not engine.raw_lookup(symbol):
                raise HostCompileError(f"the JIT has no @{symbol} (unresolved symbols?)")
            engine.dump_to_object_file(path)
        else:
            module = api["mlirModuleFromOperation"](to_handle(module_op.operation))
            with _pass_runner.error_diagnostics(module_op.operation.context) as diagnostics:
                engine = api["mlirExecutionEngineCreate"](module, opt_level, 0, None, True, True)
            if not engine.ptr:
                raise HostCompileError(_pass_runner.mlir_error(
                    "the ExecutionEngine could not be created", diagnostics).args[0])
            try:
                name = symbol.encode()
                if not api["mlirExecutionEngineLookup"](engine, _StringRef(name, len(name))):
                    raise HostCompileError(f"the JIT has no @{symbol} (unresolved symbols?)")
                target = path.encode()
                api["mlirExecutionEngineDumpToObjectFile"](engine, _StringRef(target, len(target)))
            finally:
                api["mlirExecutionEngineDestroy"](engine)
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise HostCompileError(f"the JIT wrote no object file: {e}") from None


# -- linking ---------------------------------------------------------------------

def _linker() -> str | None:
    """The C compiler driver whose linker makes the shared objects (the
    first of cc, gcc, clang, c++ on PATH), or None."""
    return _linker_on(os.environ.get("PATH", os.defpath))


@functools.lru_cache(maxsize=8)
def _linker_on(search_path: str) -> str | None:
    # Looked up once per PATH: every compile asks (twice), and a search of
    # PATH takes a quarter of a millisecond.
    for name in ("cc", "gcc", "clang", "c++"):
        path = shutil.which(name, path=search_path)
        if path:
            return path
    return None


_OUT, _IN = "@xla_gpu_out.so", "@xla_gpu_in.o"


@functools.lru_cache(maxsize=None)
def _link_lines(driver: str) -> dict[str, tuple[str, ...]] | None:
    """The linker command `driver -shared -o OUT IN -lm` runs (asked once
    with -###), with _OUT and _IN in place of the files: "full"; the same
    with -lm as its only library, "libm"; with none, "bare". None when it
    cannot be worked out. Running the linker directly skips the driver
    and collect2 (two processes of three), and an object that refers to
    nothing outside libm (or nothing at all) links to the same bytes
    without searching the other libraries (libc, libgcc: most of ld's
    time on a small kernel)."""
    import shlex
    try:
        result = subprocess.run([driver, "-###", "-shared", "-o", _OUT, _IN, "-lm"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    for line in result.stderr.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if not words or _OUT not in words or _IN not in words or words[0] == driver:
            continue
        program = os.path.basename(words[0])
        if program == "collect2":
            # gcc's wrapper around the linker it would run.
            name = subprocess.run([driver, "-print-prog-name=ld"], capture_output=True,
                                  text=True).stdout.strip()
            linker = shutil.which(name) if name else None
            if linker is None:
                return None
            words[0] = linker
        elif not program.startswith("ld"):
            continue
        full: list[str] = []
        skip = False
        for word in words:
            if skip:
                skip = False
            elif word == "-plugin":        # the LTO plugin: no LTO objects here
                skip = True
            elif not word.startswith("-plugin-opt"):
                full.append(word)
        if "-lm" not in full:
            return None
        return {"full": tuple(full),
                "libm": tuple(w for w in full if not w.startswith("-l") or w == "-lm"),
                "bare": tuple(w for w in full if not w.startswith("-l"))}
    return None


def _elf_symbols(obj: bytes) -> tuple[set[bytes], set[bytes]] | None:
    """(the global symbols the ELF64 relocatable object `obj` defines, weak
    ones aside; the symbols it refers to and does not define), or None
    when it cannot tell."""
    import struct
    try:
        if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
            return None
        (shoff,) = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)

        def section(i: int) -> tuple[int, int, int, int]:
            (kind,) = struct.unpack_from("<I", obj, shoff + i * shentsize + 4)
            offset, size, link = struct.unpack_from("<QQI", obj, shoff + i * shentsize + 24)
            return kind, offset, size, link

        defined: set[bytes] = set()
        undefined: set[bytes] = set()
        for i in range(shnum):
            kind, offset, size, link = section(i)
            if kind != 2:                                          # SHT_SYMTAB
                continue
            _, strings, _, _ = section(link)
            for j in range(1, size // 24):                         # 0: the null symbol
                name, info, _, shndx = struct.unpack_from("<IBBH", obj, offset + 24 * j)
                if not name:
                    continue
                symbol = obj[strings + name:obj.index(b"\0", strings + name)]
                if shndx == 0:                                     # SHN_UNDEF
                    undefined.add(symbol)
                elif info >> 4 == 1:                               # STB_GLOBAL
                    defined.add(symbol)
        return defined, undefined
    except (struct.error, ValueError):
        return None


def _undefined_symbols(obj: bytes) -> set[bytes] | None:
    """The symbols the ELF64 relocatable object `obj` refers to and neither
    it nor the linker defines; None when it cannot tell."""
    symbols = _elf_symbols(obj)
    return None if symbols is None else symbols[1] - _LINKER_SYMBOLS


# Symbols the linker itself defines (PIC code refers to the GOT).
_LINKER_SYMBOLS = frozenset({b"_GLOBAL_OFFSET_TABLE_"})


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


@functools.lru_cache(maxsize=None)
def _libm():
    """(libm as loaded in this process, dladdr), or None."""
    try:
        libm = ctypes.CDLL("libm.so.6")
        dladdr = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_DlInfo))(
            ("dladdr", ctypes.CDLL(None)))
    except (OSError, AttributeError):
        return None
    return libm, dladdr


@functools.lru_cache(maxsize=4096)
def _in_libm(symbol: bytes) -> bool:
    """Whether libm itself (not a library it depends on) defines `symbol`."""
    loaded = _libm()
    if loaded is None:
        return False
    libm, dladdr = loaded
    try:
        address = ctypes.cast(getattr(libm, symbol.decode()), ctypes.c_void_p).value
    except (AttributeError, UnicodeDecodeError):
        return False
    info = _DlInfo()
    if not address or not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return False
    return os.path.basename(info.dli_fname).startswith(b"libm.")


@functools.lru_cache(maxsize=None)
def _builtin_object(name: str) -> bytes | None:
    """The object of `_HOST_BUILTINS[name]`, compiled once per process
    (None without LLVM's C API: the engine's JIT resolves it instead)."""
    if _llvm_api() is None:
        return None
    helper = _ir.Module.parse(_HOST_BUILTINS[name], _xla_ir.Context())
    return _llvm_object(helper.operation, HostPipeline())


def _run_linker(command: list[str]) -> subprocess.CompletedProcess:
    """One run of the linker (every shared object is made here)."""
    return subprocess.run(command, capture_output=True, text=True)


# A kernel that calls libm (sinf, powf...) depends on libm.so.6. Linked
# against libm itself, the linker reads its symbol table, which doubles the
# link of a small kernel (2.2 -> 4.5 ms); linked against an empty library
# whose name is libm.so.6, it records the dependency alone and leaves the
# calls for the dynamic loader to bind in libm (each symbol libm's default
# version, the one the linker would have recorded; `_in_libm` checked that
# libm defines every one of them). The empty library is made once per
# process, in a private directory removed at exit.
@functools.lru_cache(maxsize=None)
def _libm_stand_in(linker: str) -> str | None:
    """The path of an empty shared object named libm.so.6 made by
    `linker`, or None when it cannot be made (then libm itself is linked)."""
    import atexit
    try:
        empty = _llvm_object(_ir.Module.parse("module {}", _xla_ir.Context()).operation,
                             HostPipeline())
        directory = tempfile.mkdtemp(prefix="xla_gpu_libm_")
    except (HostCompileError, OSError, _ir.MLIRError):
        return None
    atexit.register(shutil.rmtree, directory, True)
    source, path = os.path.join(directory, "empty.o"), os.path.join(directory, "libm.so.6")
    try:
        Path(source).write_bytes(empty)
        result = _run_linker([linker, "-shared", "-soname", "libm.so.6", "-o", path, source])
    except OSError:
        return None
    return path if result.returncode == 0 else None


def _link(objects: Sequence[bytes], driver: str) -> bytes:
    """`objects` linked into one shared object, as `driver -shared ... -lm`
    links them, with the compiler-rt helpers they call (_HOST_BUILTINS),
    each helper once; one linker run."""
    with tempfile.TemporaryDirectory(prefix="xla_gpu_link_") as tmp:
        lib_path = os.path.join(tmp, "kernel.so")
        paths = []
        outside: set[bytes] | None = set()
        defined: set[bytes] = set()
        for i, obj in enumerate(objects):
            paths.append(os.path.join(tmp, f"kernel{i}.o"))
            Path(paths[-1]).write_bytes(obj)
            symbols = _elf_symbols(obj)
            if symbols is None:
                outside = None
            elif outside is not None:
                defined |= symbols[0]
                outside |= symbols[1]
        if outside is not None:
            # Only what no object of the library defines is looked for in
            # the system's libraries.
            outside = outside - defined - _LINKER_SYMBOLS
        helpers = []
        for name in _HOST_BUILTINS:
            code = _builtin_object(name) if outside and name.encode() in outside else None
            if code is not None:
                helpers.append(os.path.join(tmp, f"{name}.o"))
                Path(helpers[-1]).write_bytes(code)
                outside = outside - {name.encode()}
        lines = _link_lines(driver)
        commands = [[driver, "-shared", "-o", lib_path, *paths, *helpers, "-lm"]]
        if lines is not None:
            inputs = [*paths, *helpers]
            line = lines["full"] if outside is None else lines["bare"] if not outside \
                else lines["libm"] if all(map(_in_libm, outside)) else lines["full"]
            if line is lines["libm"] and (stand_in := _libm_stand_in(line[0])) is not None:
                line = lines["bare"]
                inputs += ["--push-state", "--no-as-needed", stand_in, "--pop-state"]
            command = []
            for w in line:
                command.extend([lib_path] if w == _OUT else inputs if w == _IN else [w])
            commands.insert(0, command)
        for command in commands:
            result = _run_linker(command)
            if result.returncode == 0:
                return Path(lib_path).read_bytes()
        raise HostCompileError(f"linking the host kernel failed:\n{result.stderr}")


def require_linker() -> str:
    linker = _linker()
    if linker is None:
        raise HostCompileError("a shared object needs a linker: no cc, gcc or "
                               "clang on PATH")
    return linker


def host_object(module: _ir.Module, name: str = "main", *,
                opt_level: int = 3, unroll_loops: bool | None = None,
                vectorize: bool = True, pipeline: HostPipeline | None = None) -> bytes:
    """The machine code of the cpu-pipeline output `module` (LLVM dialect,
    after `pipeline.run(module, target="cpu")`) as an ELF relocatable
    object defining `<name>_host(void **args)` and
    `<name>_host_blocks(...)`, for `link_objects`. Compiled for this
    machine's CPU (the JIT's target). The module is left as it was.
    `unroll_loops`: whether LLVM's loop unrollers run (None: they do, as
    the ExecutionEngine runs them; see `unrolls_loops`); `vectorize`:
    whether its vectorizers do. `pipeline` (`host_pipeline` chooses one
    by kernel) stands for all three, with its own passes and code
    generation level where it has them."""
    copy = _object_module(module, name)
    if pipeline is None:
        if unroll_loops is None:
            unroll_loops = unrolls_loops()
        pipeline = HostPipeline(opt_level, unroll_loops, vectorize)
    return _object_code(copy, f"{name}_host", pipeline)


def _object_module(module: _ir.Module, name: str):
    """The copy of cpu-pipeline output `module` that becomes kernel
    `name`'s object: the grid's body compiled once and without the JIT's C
    interface (the shared object exports the kernel's own entries)."""
    if _find(module, "llvm.func", f"{name}_host") is None:
        raise ValueError(f"no llvm.func @{name}_host: run the cpu pipeline first")
    copy = module.operation.clone()
    for op in list(copy.body.operations):
        if op.operation.name == "llvm.func" and _ir.StringAttr(
                op.attributes["sym_name"]).value.startswith("_mlir_ciface_"):
            op.operation.erase()
    _one_body(copy, name)
    _inline_element_functions(copy, name)
    return copy


def link_objects(objects: Sequence[bytes]) -> bytes:
    """Objects of `host_object` (whose global symbols must not clash:
    `link_groups`) linked into one ELF shared object exporting every
    kernel's entries; libm is a dependency. Linked by the system C
    compiler driver's linker (cc), run once."""
    return _link(objects, require_linker())


def shared_object(module: _ir.Module, name: str = "main", *,
                  opt_level: int = 3, unroll_loops: bool | None = None) -> bytes:
    """The cpu-pipeline output `module` as an ELF shared object of its own
    exporting `<name>_host(void **args)` and `<name>_host_blocks(...)`:
    `host_object` linked alone (`link_objects`)."""
    require_linker()
    return link_objects([host_object(module, name, opt_level=opt_level,
                                     unroll_loops=unroll_loops)])


@dataclass(frozen=True)
class HostObject:
    """A program's kernel on its way into a shared library: its name, its
    object (`host_object`) and the global symbols that object defines (no
    two kernels of one library may define the same)."""
    name: str
    code: bytes = field(repr=False)
    symbols: frozenset

    @staticmethod
    def of(name: str, code: bytes) -> "HostObject":
        found = _elf_symbols(code)
        # Unreadable: it may define anything, so it clashes with any kernel
        # named alike (its entries are named after it).
        symbols = frozenset(found[0]) if found is not None else \
            frozenset({f"{name}_host".encode(), f"{name}_host_blocks".encode()})
        return HostObject(name, code, symbols)


# The objects of one library: splitting a program's kernels into more
# libraries lets their links run side by side, but each link costs a
# process start and a pass over the system's libraries however little it
# links (~5-13 ms of CPU; the 80 kernels of a GPT training step, 0.24 MB
# of objects, link in ~50 ms as one library, ~85 ms as two, ~1 s one by
# one). A library takes about this many bytes of objects before another
# one is started.
HOST_LINK_GROUP_BYTES = 2 << 20


def link_groups(objects: Sequence[HostObject], parts: int = 1) -> list[list[HostObject]]:
    """`objects` split into groups that `link_objects` links one library
    each: at most `parts` groups (more only where kernels' symbols clash:
    such kernels go to different groups), no more than their size asks
    (HOST_LINK_GROUP_BYTES), of about the same size, so that they link
    side by side in about the same time. Objects keep their order within
    a group."""
    from .grouping import balanced_groups
    total = sum(len(o.code) for o in objects)
    parts = max(1, min(parts, -(-total // HOST_LINK_GROUP_BYTES)))
    return balanced_groups(objects, parts, lambda o: len(o.code), lambda o: o.symbols)


# -- batches: the host code of several kernels in one LLVM module -----------------

# Every LLVM run on a module has a fixed cost, whatever the module holds:
# setting up the default<O3> pipeline (~1.7 ms) and code generation's
# legacy pass manager (~3 ms), most of the LLVM time of a small kernel, for
# each of a training step's ~80 kernels. A program's small kernels
# (`HostBatcher`) are translated into shared LLVM modules, one per
# `HostPipeline` at a time, each compiled once it holds about
# HOST_BATCH_LINES lines of host MLIR (the worker that fills it compiles it,
# with the GIL let go: the other compile threads keep emitting meanwhile);
# what is left is compiled side by side when the program links. A kernel
# longer than HOST_BATCH_KERNEL_LINES is compiled alone at once: the fixed
# cost is little of its LLVM time, and a long kernel waiting in a batch
# would leave its LLVM time to the end of the compile, where nothing
# overlaps it. Measured on the five real models (2 compile threads, best
# of 3 compiles, configurations alternating): batching everything at 4,000
# lines cut CPU time 9-13% but made DP-SGD's and the scanned transformer's
# wall time 10-20% longer (a long tail of batches at link time); 1,000 and
# 300 gave the best wall times (against no batching: GPT 1.86 -> 1.74 s,
# DP-SGD 1.16 -> 1.03-1.05 s, the conv net 0.89 -> 0.81-0.86 s, the others
# within 3%), ahead of 2,000 and 300, 2,000 and 600, and 4,000 and 300.
HOST_BATCH_LINES = 1000
HOST_BATCH_KERNEL_LINES = 300
# Whether a program's kernels are batched at all (False: each kernel's host
# code is compiled alone, as a single fusion's compile does).
HOST_BATCHES = True

# Linkages whose symbols never clash between kernels: local ones (LLVM's
# module linker renames a local symbol whose name is taken) and those one
# definition of which is kept (the weak hidden compiler-rt helpers).
_UNCLASHING_LINKAGES = ("internal", "private", "weak", "linkonce", "common",
                        "available_externally")


def _global_definitions(module_op) -> frozenset:
    """The names of the global symbols LLVM-dialect `module_op` defines
    that another kernel's module must not define too (two definitions of
    one external symbol: LLVM's linker refuses them)."""
    names = set()
    for op in module_op.body.operations:
        kind = op.operation.name
        if kind not in ("llvm.func", "llvm.mlir.global", "llvm.mlir.alias"):
            continue
        if not op.regions[0].blocks and "value" not in op.attributes:
            continue                                    # a declaration
        linkage = str(op.attributes["linkage"]) if "linkage" in op.attributes else ""
        if any(word in linkage for word in _UNCLASHING_LINKAGES):
            continue
        names.add(_ir.StringAttr(op.attributes["sym_name"]).value)
    return frozenset(names)


# LLVM reports what its module linker finds through the LLVM context's
# diagnostic handler; without one, LLVM prints it and exits the process on
# an error. Each batch's context reports to this handler, keyed by batch.
_LLVM_DIAGNOSTIC = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_diagnostics: dict[int, list[str]] = {}


@_LLVM_DIAGNOSTIC
def _on_llvm_diagnostic(info, key):
    api = _llvm_api()
    if api is not None and api.LLVMGetDiagInfoSeverity(info) == 0:      # LLVMDSError
        text = api._message(api.LLVMGetDiagInfoDescription(info))
        _diagnostics.setdefault(key or 0, []).append(text.decode(errors="replace"))


class HostPending:
    """A kernel whose host code waits in a batch (`HostBatcher`): its
    object (the batch's, which defines the other kernels of the batch too)
    or the error compiling it, once the batch is compiled. The kernel's
    `kernel_compiler.Executable` gets its object by `attach`."""

    def __init__(self, name: str, lines: int, timings: dict, lock: threading.Lock):
        self.name, self.lines, self._timings, self._lock = name, lines, timings, lock
        self.object: bytes | None = None
        self.error: str | None = None
        self.done = False
        self._exe = None
        self._note = ""
        self._module = None        # its own LLVM module, kept to compile it alone

    def charge(self, seconds: float) -> None:
        """Adds `seconds` to the kernel's "llvm" timing (its own part and
        its share of its batch's, added from different threads)."""
        with self._lock:
            self._timings["llvm"] = self._timings.get("llvm", 0.0) + seconds

    def attach(self, exe) -> None:
        """`exe` gets the object (and a note) when the batch is compiled,
        or now if it was already."""
        with self._lock:
            if self.done:
                self._give(exe)
            else:
                self._exe = exe

    def _give(self, exe) -> None:
        exe.host_object = self.object
        if self._note:
            exe.notes.append(self._note)

    def _finish(self, code: bytes | None, error: str | None, note: str) -> None:
        with self._lock:
            self.object, self.error, self._note, self.done = code, error, note, True
            if self._exe is not None:
                self._give(self._exe)
                self._exe = None


class _Batch:
    """Kernels' host code translated into one LLVM module of an LLVM context
    of its own (which any thread may compile, one at a time)."""

    _keys = iter(range(1, 1 << 62))

    def __init__(self, api: _LlvmApi, pipeline: HostPipeline):
        self.pipeline = pipeline
        self.key = next(self._keys)
        self.context = api.LLVMContextCreate()
        api.LLVMContextSetDiagnosticHandler(self.context, _on_llvm_diagnostic, self.key)
        self.module = None
        self.members: list[HostPending] = []
        self.symbols: set[str] = set()
        self.lines = 0
        # Kernels reserved a place but not translated in yet; the condition's
        # lock is the LLVM context's (not thread safe): one user at a time.
        self.adding = 0
        self.cond = threading.Condition()
        # A link into the module failed: its members are compiled alone.
        self.broken = False

    def dispose(self, api: _LlvmApi) -> None:
        for member in self.members:
            if member._module:
                api.LLVMDisposeModule(member._module)
                member._module = None
        if self.module:
            api.LLVMDisposeModule(self.module)
            self.module = None
        if self.context:
            api.LLVMContextDispose(self.context)
            self.context = None
        _diagnostics.pop(self.key, None)


class HostBatcher:
    """The open host-code batches of a program's compile: `add` puts a
    kernel into one (by its `HostPipeline`, apart from kernels defining a
    global symbol it defines too) and hands back a batch that became full,
    for the caller to `compile`; `finish` compiles what is left. Thread
    safe: a program's compile threads share one."""

    def __init__(self, lines: int | None = None):
        self.lines = HOST_BATCH_LINES if lines is None else lines
        # At most this many kernels in a batch (None: no bound but the
        # lines): the program sets it once it knows how many it builds, so
        # that a program of a few kernels fills a batch per compile thread
        # rather than one, compiled by one thread while the others wait.
        self.max_members: int | None = None
        self._lock = threading.Lock()
        self._open: dict[HostPipeline, list[_Batch]] = {}
        self.batches = 0          # compiled
        self.seconds = 0.0        # their LLVM time

    @staticmethod
    def available() -> bool:
        """Whether kernels can be batched here: LLVM's C API with its module
        linker (else each kernel is compiled alone, or by the JIT)."""
        api = _llvm_api()
        return HOST_BATCHES and api is not None and api.batches

    def add(self, module: _ir.Module, name: str, pipeline: HostPipeline, lines: int,
            timings: dict) -> tuple[HostPending, "_Batch | None"]:
        """Kernel `name`'s cpu-pipeline output `module` (left as it is; in
        this thread's MLIR context, which only this thread uses) into a
        batch: (its pending object, a batch to `compile` now or None).
        Raises HostCompileError when its translation fails (its batch goes
        on without it)."""
        copy = _object_module(module, name)
        symbols = _global_definitions(copy)
        api = _llvm_api()
        pending = HostPending(name, lines, timings, self._lock)
        full = None
        with self._lock:
            batches = self._open.setdefault(pipeline, [])
            batch = next((b for b in batches if not b.symbols & symbols), None)
            if batch is None:
                batch = _Batch(api, pipeline)
                batches.append(batch)
            batch.symbols |= symbols
            batch.members.append(pending)
            batch.lines += lines
            batch.adding += 1
            if batch.lines >= self.lines or \
                    (self.max_members is not None and len(batch.members) >= self.max_members):
                batches.remove(batch)
                full = batch
        with batch.cond:
            try:
                own = _translate(api, copy, batch.context)
            except HostCompileError:
                batch.members.remove(pending)
                batch.lines -= lines
                raise
            finally:
                batch.adding -= 1
                batch.cond.notify_all()
            # Its own copy, to compile it alone if the batch fails.
            pending._module = api.LLVMCloneModule(own)
            if batch.module is None:
                batch.module = own
            elif api.LLVMLinkModules2(batch.module, own):    # `own` is consumed
                batch.broken = True
                batch.members.remove(pending)
                batch.lines -= lines
                api.LLVMDisposeModule(pending._module)
                pending._module = None
                text = "; ".join(_diagnostics.pop(batch.key, [])) or "no message"
                raise HostCompileError(f"LLVM's module linker failed on {name}: {text}")
        return pending, full

    def compile(self, batch: _Batch) -> None:
        """Compiles `batch` (in the calling thread, without the GIL): each of
        its kernels gets the batch's object, "llvm" time in proportion to
        its lines, and a note. Where the batch fails, its kernels are
        compiled alone: those that still fail get the error (never raised
        here: `HostPending.error`, raised when the program links)."""
        api = _llvm_api()
        start = time.perf_counter()
        outcome: dict[int, tuple[bytes | None, str | None]] = {}
        with batch.cond:
            batch.cond.wait_for(lambda: batch.adding == 0)
            members = list(batch.members)
            names = ", ".join(m.name for m in members)
            try:
                failure = None
                if members and not batch.broken:
                    try:
                        code = _emit_object(api, batch.module, batch.pipeline)
                        outcome = {id(m): (code, None) for m in members}
                    except HostCompileError as e:
                        failure = str(e)
                if len(outcome) < len(members):
                    # The batch failed: each kernel alone, to find the one
                    # that fails (the others keep working).
                    for m in members:
                        try:
                            outcome[id(m)] = (_emit_object(api, m._module, batch.pipeline),
                                              None)
                        except HostCompileError as e:
                            outcome[id(m)] = (None, (
                                f"{e} (compiling the host code of {m.name} alone, after "
                                f"the batch of kernels {names} failed: {failure})"
                                if len(members) > 1 and failure else str(e)))
            finally:
                batch.dispose(api)
        seconds = time.perf_counter() - start
        if members:
            complete(f"LLVM host code of {len(members)} kernels", "kernel-stage", start)
        total = sum(m.lines for m in members) or 1
        for m in members:
            m.charge(seconds * m.lines / total)
            code, error = outcome.get(id(m), (None, "not compiled"))
            note = "" if len(members) == 1 else (
                f"host code compiled in one LLVM module with {len(members) - 1} other "
                f"kernels; its llvm time is its share of theirs, by lines")
            m._finish(code, error, note)
        with self._lock:
            self.batches += 1
            self.seconds += seconds

    def compile_next(self) -> bool:
        """Compiles the largest batch still open in the calling thread;
        False when none is. (A compile thread with no kernel left to build
        takes the batches then, instead of leaving them all to `finish`,
        where they would run at the very end with nothing beside them.)"""
        with self._lock:
            open_ = [b for batches in self._open.values() for b in batches]
            if not open_:
                return False
            batch = max(open_, key=lambda b: b.lines)
            self._open[batch.pipeline].remove(batch)
        self.compile(batch)
        return True

    def finish(self, map_fn=map) -> None:
        """Compiles every batch still open, the largest first, by
        `map_fn(self.compile, batches)` (a thread pool's map: side by
        side)."""
        with self._lock:
            batches = [b for open_ in self._open.values() for b in open_]
            self._open.clear()
        batches.sort(key=lambda b: b.lines, reverse=True)
        list(map_fn(self.compile, batches))

    def discard(self) -> None:
        """Frees the batches still open, uncompiled (a failed compile)."""
        api = _llvm_api()
        with self._lock:
            batches = [b for open_ in self._open.values() for b in open_]
            self._open.clear()
        for batch in batches:
            with batch.cond:
                batch.cond.wait_for(lambda b=batch: b.adding == 0)
                batch.dispose(api)

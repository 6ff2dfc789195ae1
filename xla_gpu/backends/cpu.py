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
`xla_gpu.runtime` loads with ctypes alone (no MLIR needed there).

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

from .. import ir as _xla_ir
from .. import pipeline as _pipeline

__all__ = ["compile_module", "HostKernel", "shared_object", "HostCompileError"]


class HostCompileError(RuntimeError):
    """The JIT or the linker failed; the message has the tool's output."""

_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _worker_pool() -> ThreadPoolExecutor:
    """The threads that run block ranges of `HostKernel.run(workers=N)`,
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
class HostKernel:
    """A kernel compiled for the host. `run(buffers)` runs the whole grid."""
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
            args = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
            slot = ctypes.c_void_p(ctypes.addressof(args))
            self._grid((ctypes.c_void_p * 1)(ctypes.addressof(slot)))
            return
        workers = min(workers, self.blocks)
        bounds = [self.blocks * w // workers for w in range(workers + 1)]

        def run_range(first: int, end: int) -> None:
            # _mlir_ciface_k_host_blocks(a0, ..., first, end), packed: one
            # slot per argument, pointing to its value.
            slots: list = [ctypes.c_void_p(p) for p in pointers]
            slots += [ctypes.c_int64(first), ctypes.c_int64(end)]
            packed = (ctypes.c_void_p * len(slots))(
                *[ctypes.addressof(s) for s in slots])
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
                   timings: dict[str, float] | None = None) -> HostKernel:
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
    return HostKernel(entry=entry, threads=threads, blocks=blocks,
                      num_args=num_args, arg_nbytes=arg_nbytes, engine=engine,
                      llvm_ir=llvm_ir, compile_seconds=seconds,
                      _grid=_PACKED(grid), _blocks_fn=_PACKED(blocks_fn))


def from_lowered(llvm_text: str, *, entry: str = "main",
                 context: _ir.Context | None = None, opt_level: int = 3,
                 shared_libs: Sequence[str] = ()) -> HostKernel:
    """JIT-compiles `HostKernel.llvm_ir` again (a compile-cache hit: no
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
    start = time.perf_counter()
    engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=list(shared_libs),
                             enable_object_dump=False)
    grid = engine.raw_lookup(f"_mlir_ciface_{entry}_host")
    blocks_fn = engine.raw_lookup(f"_mlir_ciface_{entry}_host_blocks")
    if not grid or not blocks_fn:
        raise HostCompileError(f"the JIT has no @{entry}_host (unresolved symbols?)")
    return HostKernel(entry=entry, threads=threads, blocks=blocks, num_args=num_args,
                      arg_nbytes=None, engine=engine, llvm_ir=llvm_text,
                      compile_seconds=time.perf_counter() - start,
                      _grid=_PACKED(grid), _blocks_fn=_PACKED(blocks_fn))


def _linker() -> str | None:
    for name in ("cc", "gcc", "clang", "c++"):
        path = shutil.which(name)
        if path:
            return path
    return None


def shared_object(module: _ir.Module, name: str = "main", *,
                  opt_level: int = 3) -> bytes:
    """The cpu-pipeline output `module` (LLVM dialect, after
    `pipeline.run(module, target="cpu")`) as an ELF shared object exporting
    `<name>_host(void **args)` and `<name>_host_blocks(...)`; libm is a
    dependency. Compiled for this machine's CPU (the JIT's target); linked
    with the system C compiler driver (cc). The module is left as it was."""
    if _find(module, "llvm.func", f"{name}_host") is None:
        raise ValueError(f"no llvm.func @{name}_host: run the cpu pipeline first")
    linker = _linker()
    if linker is None:
        raise HostCompileError("a shared object needs a linker: no cc, gcc or "
                               "clang on PATH")
    engine = ExecutionEngine(module, opt_level=opt_level, enable_object_dump=True,
                             enable_pic=True)
    if not engine.raw_lookup(f"_mlir_ciface_{name}_host"):  # compiles it
        raise HostCompileError(f"the JIT has no @{name}_host (unresolved symbols?)")
    with tempfile.TemporaryDirectory() as tmp:
        obj, lib = Path(tmp, "kernel.o"), Path(tmp, "kernel.so")
        engine.dump_to_object_file(str(obj))
        result = subprocess.run([linker, "-shared", "-o", str(lib), str(obj), "-lm"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise HostCompileError(f"linking the host kernel failed:\n{result.stderr}")
        return lib.read_bytes()

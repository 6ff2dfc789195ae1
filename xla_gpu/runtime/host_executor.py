"""The cpu target's thunk sequence run natively, in one call per execution.

Python dispatch costs several microseconds a thunk, which is most of the
run of a small program (a scan launching 60 kernels). `HostProgram` encodes
a program's thunks once as the command stream `XlaGpuHostExecute`
(`ffi/host_executor.cc`, in libXlaGpuFfi.so) runs: kernel launches through
the shared objects' `<name>_host(void **args)` entries (kernels big enough
to split over host threads as SPLIT commands, which time one thread
against block ranges on the native pool as HostKernel.launch does), copies,
memsets, while loops and conditionals (their predicates read from host
memory), and f32/f64 products without epilogue as a native gemm (small
ones; f32 ones below host_blas' split size too where the host has
AVX-512: register tiles as fast as BLAS there, without the callback).
Everything else (custom calls, FFTs, larger or converting gemms, kernels
held by the JIT) stays a Python thunk the executor calls back for, on the
same thread, with the same ExecutionContext; its exceptions come out of
`run` unchanged.

A program without Python thunks runs through `_host_run.HostRun`
(ffi/host_run.c, built from `_CpuRunPlan.host_run`), which also does the
run's argument checks, buffer pool and output arrays in C.

`XLA_GPU_HOST_EXECUTOR=python` runs every thunk from Python instead (the
reference the native path is tested against); without the library (a
source tree where it cannot be built) programs run that way too.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any, Sequence

import numpy as np

from .._ctypes_arrays import array_of, array_type
from ..errors import DeadlineExceededError
from .host_blas import HOST_BLAS_SPLIT_MACS
from .thunks import (CommandBufferThunk, ConditionalThunk, CopyThunk, ExecutionContext,
                     GemmThunk, KernelThunk, MemsetThunk, ThunkError, Thunk, WhileThunk,
                     _SequenceThunk)

__all__ = ["HostProgram", "native_executor", "native_block_runner", "host_program"]

KERNEL, COPY, MEMSET, WHILE, CONDITIONAL, CALL, GEMM, COUNT, SPLIT, FOR = range(1, 11)
# int64 words of a SPLIT kernel's probe slot (kProbeWords).
PROBE_WORDS = 8
# The executor's counters, in its order, as ExecutionContext.stats names them.
STATS = ("kernels", "copies", "memsets", "gemms", "while_iterations", "command_buffers")
# Length of the executor's counter array (kNumStats in host_executor.cc).
_COUNTERS = 8
_COMMAND_BUFFERS = STATS.index("command_buffers")
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64)
_POLL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
# XlaGpuHostExecute's result codes past 0 (ok), 1 (a callback failed) and
# 2 (a malformed command).
_INTERRUPTED, _DEADLINE_EXCEEDED = 3, 4


class _Control(ctypes.Structure):
    """XlaGpuHostControl: what may stop a run between iterations of a
    while loop (a poll that runs Python's signal handlers, a deadline in
    CLOCK_MONOTONIC nanoseconds, 0 for none)."""
    _fields_ = [("poll", _POLL), ("arg", ctypes.c_void_p), ("deadline_ns", ctypes.c_int64)]


# Products at most this many multiply-adds run in the executor's own loop;
# larger ones go to numpy's BLAS (threaded, blocked).
NATIVE_GEMM_MAX_FLOPS = 1 << 18
# With AVX-512 the executor's register tiles run an f32 product whose output
# rows are contiguous as fast as OpenBLAS's AVX-512 kernels on one thread
# (twice its AVX2 ones), and without the Python callback's 5-8 us: those
# products run natively up to the size where runtime.host_blas splits a
# product over threads. Not a transposed rhs with few rows and a short k
# (packing it would cost as much as the product).
NATIVE_GEMM_WIDE_MAX_FLOPS = HOST_BLAS_SPLIT_MACS - 1
NATIVE_GEMM_WIDE_MIN_ROWS = 64
# Fewer rows with operands both contiguous along k run as dot products
# from this k on (the executor's choice, kDotsMinK in host_executor.cc).
NATIVE_GEMM_DOTS_MIN_K = 256
# Longer products run in the executor's plain loop (kTileMaxK), shorter
# rows than a vector waste most of a tile: those stay numpy's.
NATIVE_GEMM_TILE_MAX_K = 8192
NATIVE_GEMM_WIDE_MIN_COLUMNS = 16
# A kernel whose launcher may split its grid (HostKernel.workers > 1) runs
# as a SPLIT command, which times one thread against block ranges on the
# native pool as HostKernel.launch does. Where that pool is missing, kernels
# of at least this many threads in all stay Python launches (their launcher
# splits through a ThreadPoolExecutor); smaller ones run on one thread.
SPLIT_THREADS = 1 << 16
# XlaGpuHostRunBlocks calls kernels of at most this many arguments
# (kMaxArgs in host_blocks.cc).
SPLIT_MAX_ARGS = 64
# Deeper nests of loops and branches are left to Python (no deep recursion
# in the encoder).
MAX_NESTING = 64

_P, _I64 = ctypes.c_void_p, ctypes.c_int64


@functools.lru_cache(maxsize=None)
def _library_function(name: str, restype, *argtypes):
    """`name` from libXlaGpuFfi.so with its C signature, or None when the
    library cannot be loaded or built here."""
    try:
        from ..ffi import _native
        fn = getattr(_native.lib(), name)
    except (ImportError, OSError, AttributeError, RuntimeError):
        return None
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


@functools.lru_cache(maxsize=None)
def _signal_poll():
    """The executor's poll (Python's signal handlers between iterations of
    a while loop) and the function that raises what they raised, made once
    per process: the C extension's, which keeps the exception until asked. Without the
    extension, a Python callback polls (ctypes then reports a
    KeyboardInterrupt raised on the callback's entry as ignored, and the
    run stops with a plain KeyboardInterrupt)."""
    try:
        from ._host_run import poll_address, raise_pending
        return _POLL(poll_address()), raise_pending
    except ImportError:
        pass
    check = ctypes.PYFUNCTYPE(ctypes.c_int)(("PyErr_CheckSignals", ctypes.pythonapi))
    pending: list[BaseException] = []

    def poll(_arg) -> int:
        try:
            check()
            return 0
        except BaseException as e:   # noqa: BLE001  (re-raised by raise_pending)
            pending.append(e)
            return 1

    def raise_pending() -> None:
        if pending:
            raise pending.pop()
    return _POLL(poll), raise_pending


def native_executor():
    """`XlaGpuHostExecute` from libXlaGpuFfi.so, or None when the library
    cannot be loaded or built here (programs then run from Python)."""
    return _library_function("XlaGpuHostExecute", _I64, _P, _I64, _P, _I64, _P, _I64,
                             _P, _I64, _CALLBACK, _P, _P, ctypes.POINTER(_Control))


def native_block_runner():
    """`XlaGpuHostRunBlocks` (ffi/host_blocks.cc: a kernel's block ranges on
    a native thread pool, 5-10x cheaper to hand out than through a
    ThreadPoolExecutor), or None where libXlaGpuFfi.so cannot be loaded or
    `XLA_GPU_HOST_EXECUTOR=python` asks for Python."""
    if os.environ.get("XLA_GPU_HOST_EXECUTOR", "native") == "python":
        return None
    return _library_function("XlaGpuHostRunBlocks", _I64, _P, _P, _I64, _I64, _I64)


def host_program(thunks: Sequence[Thunk], launchers: dict[str, Any]) -> "HostProgram | None":
    """The program's native form, None when it must run from Python."""
    if os.environ.get("XLA_GPU_HOST_EXECUTOR", "native") == "python":
        return None
    entry = native_executor()
    if entry is None:
        return None
    return HostProgram(thunks, launchers, entry)


def _kernel_entries(launcher) -> tuple[int, int | None] | None:
    """How the executor runs a shared-object kernel: (address of
    `<name>_host(void **args)`, address of `<name>_host_blocks` for a grid
    it may split, else None); None keeps it a Python launch."""
    entry = getattr(launcher, "_entry", None)
    spec = getattr(launcher, "spec", None)
    if entry is None or spec is None:
        return None
    whole = ctypes.cast(entry, ctypes.c_void_p).value
    if getattr(launcher, "workers", 1) > 1:
        # The launcher found its `_host_blocks` entry and the native pool.
        if getattr(launcher, "_run_blocks", None) is not None and \
                len(spec.kernel_args) <= SPLIT_MAX_ARGS:
            return whole, launcher._blocks_address
        if spec.threads * spec.blocks * max(spec.blocks_y, 1) >= SPLIT_THREADS:
            return None
    return whole, None


def _gemm_words(config) -> list[int] | None:
    """The GEMM command of a plain f32/f64 product small enough for the
    executor's loop, whose output overlaps neither operand."""
    from .gemm import _is_plain_product, collapsed_stride, element_strides
    t = config.out.element_type
    if t not in ("f32", "f64") or not _is_plain_product(config):
        return None
    batch, m, n, k = config.bmnk
    macs = batch * m * n * k
    if macs > max(NATIVE_GEMM_MAX_FLOPS, NATIVE_GEMM_WIDE_MAX_FLOPS):
        return None
    out = config.out.slice
    if out.overlaps(config.lhs.slice) or out.overlaps(config.rhs.slice):
        return None
    groups = [
        (config.lhs, (config.lhs_batch, config.lhs_free, config.lhs_contracting)),
        (config.rhs, (config.rhs_batch, config.rhs_contracting, config.rhs_free)),
        (config.out, config.output_groups),
    ]
    words = [GEMM, 0 if t == "f32" else 1, batch, m, n, k]
    for ref, dims in groups:
        element = element_strides(ref)
        strides = [collapsed_stride(ref, d, element) for d in dims]
        if any(s is None for s in strides):
            return None
        words += [ref.slice.allocation, ref.slice.offset, *strides]
    if macs > NATIVE_GEMM_MAX_FLOPS and not _wide_native_gemm(t, m, words):
        return None
    return words


def native_gemm_vector_width() -> int:
    """The f32 vector width of the executor's GEMM tiles on this host: 16
    (AVX-512), 8 (AVX2), 0 (a plain loop, or no executor)."""
    fn = _library_function("XlaGpuHostGemmVectorWidth", _I64)
    return int(fn()) if fn is not None else 0


def _wide_native_gemm(element_type: str, m: int, words: list[int]) -> bool:
    """Whether a product above NATIVE_GEMM_MAX_FLOPS (and at most
    NATIVE_GEMM_WIDE_MAX_FLOPS) runs natively: f32 on AVX-512 tiles, output
    rows contiguous, rhs rows contiguous or enough rows to pack it."""
    k = words[5]
    lhs_column_stride, rhs_row_stride, rhs_column_stride = words[10], words[14], words[15]
    # Dot products along k (as host_executor.cc picks them): both operands
    # contiguous along a long k.
    dots = lhs_column_stride == 1 and rhs_row_stride == 1 and k >= NATIVE_GEMM_DOTS_MIN_K
    return element_type == "f32" and native_gemm_vector_width() >= 16 and \
        words[20] == 1 and k <= NATIVE_GEMM_TILE_MAX_K and \
        words[4] >= NATIVE_GEMM_WIDE_MIN_COLUMNS and \
        (rhs_column_stride == 1 or m >= NATIVE_GEMM_WIDE_MIN_ROWS or dots)


class HostProgram:
    """A thunk sequence as `XlaGpuHostExecute`'s command stream."""

    def __init__(self, thunks: Sequence[Thunk], launchers: dict[str, Any], entry):
        self._entry = entry
        # Per kernel name: its command's words before and after the argument
        # count, or None for a Python launch.
        self._kernel_words: dict[str, tuple[list[int], list[int]] | None] = {}
        self._kernel_addresses: list[int] = []
        self._split_kernels = 0
        self.callbacks: list[Thunk] = []
        words: list[int] = []
        self._encode(thunks, launchers, words, 0)
        self.code = np.asarray(words, np.int64)
        self._kernels = array_of(ctypes.c_void_p, self._kernel_addresses)
        # The SPLIT kernels' probe slots: zero is "not timed yet".
        self._probes = np.zeros(max(self._split_kernels, 1) * PROBE_WORDS, np.int64)
        self._current = threading.local()
        self._callback = _CALLBACK(self._run_callback)
        self._poll, self._raise_pending = _signal_poll()

    @property
    def code(self) -> np.ndarray:
        """The command stream (int64 words)."""
        return self._code

    @code.setter
    def code(self, words: np.ndarray) -> None:
        # The address is taken once: `.ctypes.data` costs microseconds a run.
        self._code = np.ascontiguousarray(words, np.int64)
        self._code_address = self._code.ctypes.data

    def entry_points(self) -> tuple[tuple[int, ...], tuple]:
        """What a caller in C needs to run this program without ctypes:
        (executor address, code address, code length, kernel table address,
        kernel count, probe slots' address, probe slot count), and the
        objects those addresses point into, to be kept alive with it."""
        addresses = (ctypes.cast(self._entry, ctypes.c_void_p).value, self._code_address,
                     len(self._code), ctypes.addressof(self._kernels),
                     len(self._kernel_addresses), self._probes.ctypes.data,
                     self._split_kernels)
        return addresses, (self._code, self._kernels, self._probes)

    @property
    def native_fraction(self) -> tuple[int, int]:
        """(commands the executor runs itself, thunks it calls back for)."""
        return len(self.code), len(self.callbacks)

    # -- encoding ------------------------------------------------------------
    def _call(self, thunk: Thunk, words: list[int]) -> None:
        words += [CALL, len(self.callbacks)]
        self.callbacks.append(thunk)

    def _encode(self, thunks: Sequence[Thunk], launchers, words: list[int], depth: int) -> None:
        for thunk in thunks:
            self._encode_one(thunk, launchers, words, depth)

    def _encode_one(self, thunk: Thunk, launchers, words: list[int], depth: int) -> None:
        if isinstance(thunk, KernelThunk):
            if thunk.kernel not in self._kernel_words:
                self._kernel_words[thunk.kernel] = self._kernel_command(
                    launchers.get(thunk.kernel))
            command = self._kernel_words[thunk.kernel]
            if command is None:
                self._call(thunk, words)
                return
            head, tail = command
            words += [*head, len(thunk.args), *tail]
            for s in thunk.args:
                words += [s.allocation, s.offset]
        elif isinstance(thunk, CopyThunk):
            words += [COPY, thunk.destination.allocation, thunk.destination.offset,
                      thunk.source.allocation, thunk.source.offset, thunk.size]
        elif isinstance(thunk, MemsetThunk) and thunk.width in (1, 2, 4):
            words += [MEMSET, thunk.destination.allocation, thunk.destination.offset,
                      thunk.pattern, thunk.width, thunk.count]
        elif isinstance(thunk, GemmThunk):
            gemm = _gemm_words(thunk.config)
            if gemm is None:
                self._call(thunk, words)
            else:
                words += gemm
        elif isinstance(thunk, WhileThunk) and depth < MAX_NESTING and \
                thunk.trip_count is not None:
            body: list[int] = []   # a known count: the body alone, as WhileThunk runs it
            self._encode(thunk.body, launchers, body, depth + 1)
            words += [FOR, thunk.trip_count, len(body), *body]
        elif isinstance(thunk, WhileThunk) and depth < MAX_NESTING and \
                thunk.predicate.element_type == "pred":
            condition: list[int] = []
            body = []
            self._encode(thunk.condition, launchers, condition, depth + 1)
            self._encode(thunk.body, launchers, body, depth + 1)
            words += [WHILE, thunk.predicate.slice.allocation, thunk.predicate.slice.offset,
                      len(condition), len(body), *condition, *body]
        elif isinstance(thunk, ConditionalThunk) and depth < MAX_NESTING and \
                thunk.selector.element_type in ("pred", "s32") and thunk.branches:
            branches = []
            for branch in thunk.branches:
                code: list[int] = []
                self._encode(branch, launchers, code, depth + 1)
                branches.append(code)
            words += [CONDITIONAL, thunk.selector.slice.allocation, thunk.selector.slice.offset,
                      int(thunk.selector.element_type == "pred"), len(branches),
                      *(len(b) for b in branches)]
            for code in branches:
                words += code
        elif isinstance(thunk, _SequenceThunk) and depth < MAX_NESTING:
            # Sorts, top-k, convolutions and command buffers run their
            # sequence in order on the cpu target.
            if isinstance(thunk, CommandBufferThunk):
                words += [COUNT, _COMMAND_BUFFERS]
            self._encode(thunk.sequence, launchers, words, depth + 1)
        else:
            self._call(thunk, words)

    def _kernel_command(self, launcher) -> tuple[list[int], list[int]] | None:
        """A kernel's command words before and after its argument count
        (KERNEL fn | nargs; SPLIT whole blocks_fn | nargs | blocks parts
        probe runs reprobe), or None for a Python launch."""
        entries = _kernel_entries(launcher)
        if entries is None:
            return None
        whole, blocks_fn = entries
        first = len(self._kernel_addresses)
        self._kernel_addresses.append(whole)
        if blocks_fn is None:
            return [KERNEL, first], []
        self._kernel_addresses.append(blocks_fn)
        probe = self._split_kernels
        self._split_kernels += 1
        return [SPLIT, first, first + 1], [launcher.spec.blocks, launcher.workers, probe,
                                           launcher.PROBE_RUNS, launcher.REPROBE_EVERY]

    # -- running -------------------------------------------------------------
    def _run_callback(self, index: int) -> int:
        try:
            self.callbacks[index].execute(self._current.ctx)
            return 0
        except BaseException as e:   # noqa: BLE001  (re-raised by run)
            self._current.error = e
            return 1

    def _execute(self, bases: Sequence[int], ctx: ExecutionContext | None,
                 deadline_ns: int | None = None) -> dict[str, int]:
        """One native run on allocations at `bases` (`ctx`: what the
        Python thunks run on); returns the counters by their stats names.
        Ctrl-C stops it between iterations of a while loop, as does
        `deadline_ns` (time.monotonic_ns()) once passed."""
        stats = array_type(ctypes.c_int64, _COUNTERS)()
        error_at = ctypes.c_int64(-1)
        control = _Control(self._poll, None, deadline_ns or 0)
        self._current.ctx, self._current.error = ctx, None
        if ctx is not None:
            # ctx.cancel() from another thread stops the run through the
            # control block; read its deadline again in case it came first.
            ctx.native_control = control
            if ctx.deadline_ns is not None:
                control.deadline_ns = ctx.deadline_ns
        try:
            rc = self._entry(self._code_address, len(self._code),
                             array_of(ctypes.c_void_p, bases), len(bases),
                             self._kernels, len(self._kernel_addresses),
                             self._probes.ctypes.data, self._split_kernels, self._callback,
                             stats, ctypes.byref(error_at), ctypes.byref(control))
            error = self._current.error
        finally:
            self._current.ctx = self._current.error = None
            if ctx is not None:
                ctx.native_control = None
        if rc == 1 and error is not None:
            raise error
        if rc == _INTERRUPTED:
            self._raise_pending()
            raise KeyboardInterrupt
        if rc == _DEADLINE_EXCEEDED:
            raise DeadlineExceededError()
        if rc != 0:
            raise ThunkError(f"the native thunk executor refused command word "
                             f"{error_at.value} of the program (code {rc})")
        return {name: value for name, value in zip(STATS, stats) if value}

    def run_on(self, bases: Sequence[int], deadline_ns: int | None = None) -> dict[str, int]:
        """Runs a program without Python thunks on allocations at `bases`;
        returns the counters (ExecutionContext.stats' names)."""
        return self._execute(bases, None, deadline_ns)

    def run(self, ctx: ExecutionContext) -> None:
        """Runs the program on `ctx`'s buffers (the cpu target's), Python
        thunks included; the counters go to `ctx.stats`."""
        ctx.stats.update(self._execute(ctx._bases, ctx, ctx.deadline_ns))


# Arguments the C run path reads in place must be aligned this much
# (ARGUMENT_ALIGNMENT in ffi/host_run.c); its pool's buffers are aligned to
# spec.POOL_ALIGNMENT.
_C_ARGUMENT_ALIGNMENT = 16
# Outputs larger than this in all go the Python way, which checks first
# that they fit in host memory.
_C_RUN_OUTPUT_BYTES = 1 << 26


def kernel_host_run(kernel) -> Any:
    """A single cpu-target kernel's run as one `_host_run.HostRun` call
    (argument checks, output buffers from a pool, the launch through the
    executor, a KERNEL or SPLIT command, the output arrays), as
    `HostKernel.run` does it in Python; None where that path cannot
    (no extension or executor, XLA_GPU_HOST_EXECUTOR=python, a kernel
    needing stricter alignment than it gives, outputs converted from their
    storage type or too large)."""
    from .buffers import BufferSlice
    from .spec import POOL_ALIGNMENT
    from .thunks import KernelThunk
    try:
        from ._host_run import HostRun
    except ImportError:
        return None
    spec = kernel.spec
    copied = set(spec.aliases.values())
    if len(copied) != len(spec.aliases) or spec.output_nbytes > _C_RUN_OUTPUT_BYTES or \
            any(spec.outputs[k].nbytes != spec.parameters[j].nbytes
                for k, j in spec.aliases.items()):
        return None
    if any(p.alignment > (POOL_ALIGNMENT if j in copied else _C_ARGUMENT_ALIGNMENT) or
           p.nbytes == 0 for j, p in enumerate(spec.parameters)):
        return None
    if any(o.alignment > POOL_ALIGNMENT or o.nbytes == 0 or o.numpy_dtype != o.storage_dtype
           for o in spec.outputs):
        return None
    # Allocations: parameter j is j; output k that no parameter holds comes
    # after them. Every output is a pool buffer handed out as it is.
    allocation = {k: len(spec.parameters) + n
                  for n, k in enumerate(k for k in range(len(spec.outputs))
                                        if k not in spec.aliases)}
    allocation.update(spec.aliases)
    args = [BufferSlice(i, 0, spec.parameters[i].nbytes) if kind == "param" else
            BufferSlice(allocation[i], 0, spec.outputs[i].nbytes)
            for kind, i in spec.kernel_args]
    thunk = KernelThunk(spec.name, spec.name, args, threads=spec.threads, blocks=spec.blocks)
    program = host_program([thunk], {spec.name: kernel})
    if program is None or program.callbacks:
        return None
    parameters = [(j, j not in copied, 0, p.nbytes, p.storage_dtype, tuple(p.shape))
                  for j, p in enumerate(spec.parameters)]
    pools = [(allocation[k], o.nbytes, False, False, k, o.storage_dtype, tuple(o.shape))
             for k, o in enumerate(spec.outputs)]
    addresses, keep = program.entry_points()
    return HostRun(*addresses, keep, ThunkError,
                   len(spec.parameters) + len(spec.outputs) - len(spec.aliases), [],
                   parameters, pools, [], len(spec.outputs))

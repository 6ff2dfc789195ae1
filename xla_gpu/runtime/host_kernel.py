"""A cpu-target kernel in a shared object, run on host threads (what
`xla_gpu.runtime.load` and a whole program's launchers load for the cpu
target; re-exported by xla_gpu.runtime).
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .._ctypes_arrays import array_of
from ..errors import ArtifactError
from .memory import check_host_memory
from .spec import KernelSpec

__all__ = ["HostKernel", "check_output_memory", "load_library"]


def load_library(library: bytes, what: str) -> ctypes.CDLL:
    """Loads a shared object held in memory (already verified): written to
    a private temporary file, loaded, and unlinked (the mapping stays).
    ArtifactError naming `what` when it does not load."""
    fd, path = tempfile.mkstemp(prefix="xla_gpu_", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(library)
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            raise ArtifactError(f"{what}: the host kernel does not load: {e}") from None
    finally:
        os.unlink(path)


class HostKernel:
    """A cpu-target kernel in a shared object: `<name>_host(void **args)`
    runs the whole grid on one thread, `<name>_host_blocks(a0, ..., aN-1,
    first, end)` a range of blocks. A grid of `SPLIT_MIN_BLOCKS` blocks or
    more may run as ranges on several host threads (the native block pool
    of ffi/host_blocks.cc, else a ThreadPoolExecutor; the kernel runs
    without the GIL): whether that is faster depends on the kernel's length
    and on how busy the machine is (handing a range to another thread costs
    ~5-20 us natively, 40-300 us through Python), so the first runs try
    both ways, `PROBE_RUNS` each (one thread first: the first run also
    faults in fresh output pages), the faster is kept, and the choice is
    made again every `REPROBE_EVERY` runs. See xla_gpu.backends.cpu.

    `run` goes through C where it can (host_executor.kernel_host_run: the
    argument checks, output pool and launch of a one-kernel program in
    `_host_run.HostRun`, 10-40 us less a run); other arguments, and
    kernels it cannot take, run from Python."""

    PROBE_RUNS = 3
    REPROBE_EVERY = 500
    # Grids this large are probed both ways (a 4-block column reduction of
    # 1024-thread blocks gains from two threads too).
    SPLIT_MIN_BLOCKS = 2

    _pool: ThreadPoolExecutor | None = None
    _pool_lock = threading.Lock()

    def __init__(self, spec: KernelSpec, library: str | Path | ctypes.CDLL):
        """`library`: the shared object's path, or the library loaded (the
        kernels of a program linked into one share it)."""
        self.spec = spec
        self._lib = library if isinstance(library, ctypes.CDLL) else ctypes.CDLL(str(library))
        self._entry = getattr(self._lib, f"{spec.name}_host")
        self._entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self._entry.restype = None
        self._blocks = getattr(self._lib, f"{spec.name}_host_blocks", None)
        nargs = len(spec.kernel_args)
        if self._blocks is not None:
            self._blocks.argtypes = [ctypes.c_void_p] * nargs + [ctypes.c_int64] * 2
            self._blocks.restype = None
        self.workers = min(os.cpu_count() or 1, 8) \
            if spec.blocks >= self.SPLIT_MIN_BLOCKS else 1
        # Block ranges go to the native pool where the library loads.
        self._blocks_address = self._run_blocks = None
        if self._blocks is not None and self.workers > 1:
            from .host_executor import native_block_runner
            self._run_blocks = native_block_runner()
            self._blocks_address = ctypes.cast(self._blocks, ctypes.c_void_p).value
        # Seconds of the probing runs, one thread (False) and split (True).
        self._probe: dict[bool, list[float]] = {False: [], True: []}
        self.split: bool | None = None   # None while probing
        self._runs_since_probe = 0
        # `run`'s C path (host_executor.kernel_host_run): None until the
        # first run, False where it cannot be used.
        self._c_run: Any = None

    @staticmethod
    def from_bytes(spec: KernelSpec, library: bytes) -> "HostKernel":
        """Loads a shared object held in memory (already verified): written
        to a private temporary file, loaded, and unlinked (the mapping
        stays)."""
        return HostKernel.in_library(spec, load_library(library, spec.name))

    @staticmethod
    def in_library(spec: KernelSpec, library: ctypes.CDLL) -> "HostKernel":
        """The kernel `spec.name` of loaded `library`; ArtifactError when the
        library lacks its entry."""
        try:
            return HostKernel(spec, library)
        except AttributeError as e:
            raise ArtifactError(f"{spec.name}: the host kernel does not load: {e}") from None

    def launch(self, pointers: Sequence[int], stream=None) -> None:
        """Runs the grid on raw buffer pointers (the kernel's arguments)."""
        if self.workers <= 1 or self._blocks is None:
            self._run_whole(pointers)
            return
        if self.split is None:
            split = len(self._probe[False]) >= self.PROBE_RUNS
            start = time.perf_counter()
            (self._run_split if split else self._run_whole)(pointers)
            self._probe[split].append(time.perf_counter() - start)
            if len(self._probe[True]) >= self.PROBE_RUNS:
                self.split = min(self._probe[True]) < min(self._probe[False])
                self._runs_since_probe = 0
            return
        (self._run_split if self.split else self._run_whole)(pointers)
        self._runs_since_probe += 1
        if self._runs_since_probe >= self.REPROBE_EVERY:
            self.split, self._probe = None, {False: [], True: []}

    def _run_whole(self, pointers: Sequence[int]) -> None:
        packed = array_of(ctypes.c_void_p, pointers)
        self._entry(packed)

    def _run_split(self, pointers: Sequence[int]) -> None:
        if self._run_blocks is not None:
            packed = array_of(ctypes.c_void_p, pointers)
            if self._run_blocks(self._blocks_address, packed, len(pointers),
                                self.spec.blocks, self.workers) == 0:
                return
        with HostKernel._pool_lock:
            if HostKernel._pool is None:
                HostKernel._pool = ThreadPoolExecutor(min(os.cpu_count() or 1, 8),
                                                      thread_name_prefix="xla_gpu_host")
        blocks, workers = self.spec.blocks, self.workers
        bounds = [blocks * w // workers for w in range(workers + 1)]
        # The first range runs on this thread, the others on the pool.
        futures = [HostKernel._pool.submit(self._blocks, *pointers, bounds[w], bounds[w + 1])
                   for w in range(1, workers)]
        try:
            self._blocks(*pointers, bounds[0], bounds[1])
        finally:
            for future in futures:
                future.result()

    def run(self, *args) -> tuple[np.ndarray, ...]:
        if self._c_run is None:
            from .host_executor import kernel_host_run
            self._c_run = kernel_host_run(self) or False
        if self._c_run is not False:
            # The whole run in C where every argument is exactly what the
            # kernel reads (NotImplemented otherwise: the Python path then
            # converts, copies or reports).
            results = self._c_run(*args)
            if results is not NotImplemented:
                return results
        check_output_memory(self.spec)
        pointers, outputs, convert, _held = self.spec.host_call(args)
        self.launch(pointers)
        return self.spec.results(outputs) if convert else tuple(outputs)


def check_output_memory(spec: KernelSpec) -> None:
    """Large outputs must fit in host memory: a clear ResourceError instead
    of numpy's allocation failure."""
    nbytes = spec.output_nbytes
    if nbytes > 1 << 26:
        check_host_memory(nbytes, f"the outputs of kernel '{spec.name}'")

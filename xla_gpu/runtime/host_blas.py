"""How numpy's BLAS runs a cpu-target gemm: on one thread, large products
split into panels that the caller and helper threads claim one by one.

OpenBLAS splits every product above about 2^18 multiply-adds statically
over all its threads and waits for the slowest. On a host whose cores are
shared (other processes, or the run's own kernels on the native pool), a
thread that is not scheduled stalls the whole product: measured on two
shared cores, 2-4x slower than one thread for products of 8M-500M
multiply-adds, and its idle threads keep spinning afterwards.

So `blas_matmul` runs BLAS on one thread (restoring the process's setting
afterwards, so a caller's own numpy is untouched), and splits a product of
at least HOST_BLAS_SPLIT_MACS multiply-adds into batch panels, or row or
column panels across the longer side of the output (each panel's BLAS
call packs the other operand again, so that one should be the smaller):
the calling thread and `helper_threads()` helpers each claim the next
panel until none is left, so a helper that has no core runs none and
holds back nobody, and an idle machine still gets every core (numpy
releases the GIL inside matmul). Only OpenBLAS (numpy's wheels bundle it)
is controlled; with another BLAS, or none found, products run as numpy
runs them.

Which kernels OpenBLAS runs is its own choice (or `OPENBLAS_CORETYPE`'s):
on a CPU with AVX-512, its AVX2 "Haswell" kernels do half the f32
multiply-adds per cycle of its "SkylakeX" ones.
"""
from __future__ import annotations

import ctypes
import functools
import itertools
import os
import queue
import re
import threading

import numpy as np

__all__ = ["HOST_BLAS_SPLIT_MACS", "OPENBLAS_ONE_THREAD_MACS", "blas_matmul",
           "single_threaded_blas", "restore_blas_threads", "openblas_threads", "openblas_core",
           "helper_threads"]

# OpenBLAS runs a product of at most this many multiply-adds (m * n * k of
# one matrix product: numpy calls it per batch entry) on one thread
# whatever its setting (interface/gemm.c: 65536 x GEMM_MULTITHREAD_THRESHOLD
# of 4), so such products skip the setting's get and set (about 1 us, as
# long as a 32x32 product itself).
OPENBLAS_ONE_THREAD_MACS = 1 << 18

# Products of at least this many multiply-adds (about half a millisecond on
# one core) are split into panels for the helper threads: past the ~50 us
# a helper takes to wake.
HOST_BLAS_SPLIT_MACS = 1 << 24
# Panels per thread taking part: a thread without a core holds back at
# most one, and each stays a BLAS-sized product (each panel's call packs
# one operand again: 8 panels of 2 threads cost 10-20% over one call on
# AVX2 kernels, up to 2x on AVX-512 ones; 4 panels 3-10%).
_PANELS_PER_THREAD = 2
# Rows or columns of the output per panel, at least.
_MIN_PANEL = 32

_SET_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
              "openblas_set_num_threads64_", "openblas_set_num_threads")
_lock = threading.Lock()
# Products in flight on one thread, per process: the setting is restored
# when the last one ends (products of several host threads overlap).
_single = 0
_saved = 0


@functools.lru_cache(maxsize=None)
def _openblas_libraries() -> tuple:
    """The OpenBLAS libraries numpy loaded (CDLLs), none when numpy uses
    another BLAS or they cannot be found."""
    import numpy  # noqa: F401  (loads its BLAS)
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return ()
    libraries = []
    for path in sorted({m for m in re.findall(r"(/\S*openblas\S*\.so\S*)", maps)}):
        try:
            libraries.append(ctypes.CDLL(path))
        except OSError:
            continue
    return tuple(libraries)


@functools.lru_cache(maxsize=None)
def openblas_threads():
    """(set, get) of the OpenBLAS numpy loaded, or None when numpy uses
    another BLAS or it cannot be found."""
    for lib in _openblas_libraries():
        for name in _SET_NAMES:
            setter = getattr(lib, name, None)
            getter = getattr(lib, name.replace("set_", "get_"), None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                return setter, getter
    return None


def openblas_core() -> str | None:
    """The kernel family numpy's OpenBLAS runs on this host ("SkylakeX",
    "Haswell", ...: what OPENBLAS_CORETYPE forces, or its own choice), for
    benchmarks to print; None without OpenBLAS."""
    for lib in _openblas_libraries():
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename64_", "openblas_get_corename"):
            getter = getattr(lib, name, None)
            if getter is not None:
                getter.argtypes, getter.restype = [], ctypes.c_char_p
                return (getter() or b"").decode(errors="replace")
    return None


def single_threaded_blas() -> bool:
    """Before a product: drops numpy's BLAS to one thread. Returns whether
    it could (OpenBLAS); then `restore_blas_threads()` must follow the
    product."""
    global _single, _saved
    control = openblas_threads()
    if control is None:
        return False
    setter, getter = control
    with _lock:
        if _single == 0:
            _saved = getter()
            if _saved > 1:
                setter(1)
        _single += 1
    return True


def restore_blas_threads() -> None:
    """Ends a `single_threaded_blas` product: the last one in flight gives
    BLAS its threads back."""
    global _single
    with _lock:
        _single -= 1
        if _single == 0 and _saved > 1:
            openblas_threads()[0](_saved)


def helper_threads() -> int:
    """Threads besides the caller that take panels of a split product: the
    cores this process may run on, less one (at most 7)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(0, min(cores, 8) - 1)


class _Split:
    """One split product: panels claimed in order by whoever comes."""

    def __init__(self, run_panel, panels: int):
        self.run_panel, self.panels = run_panel, panels
        self.next = itertools.count()
        self.lock = threading.Condition()
        self.helpers_inside = 0
        self.closed = False
        self.error: BaseException | None = None

    def work(self) -> None:
        while True:
            panel = next(self.next)      # atomic under the GIL
            if panel >= self.panels:
                return
            self.run_panel(panel)

    def help(self) -> None:
        """A helper's turn: nothing when the caller already finished."""
        with self.lock:
            if self.closed:
                return
            self.helpers_inside += 1
        try:
            self.work()
        except BaseException as e:   # noqa: BLE001  (re-raised by the caller)
            self.error = e
        finally:
            with self.lock:
                self.helpers_inside -= 1
                self.lock.notify_all()

    def finish(self) -> None:
        """The caller, after its own panels: waits for the panels helpers
        hold, never for a helper that has not started."""
        with self.lock:
            self.closed = True
            while self.helpers_inside:
                self.lock.wait()
        if self.error is not None:
            raise self.error


_helpers: list[queue.SimpleQueue] = []
_helpers_lock = threading.Lock()
_helpers_pid = 0


def _helper_queues() -> list[queue.SimpleQueue]:
    """The helper threads' job queues, started on first use (again in a
    forked child, which has none of its parent's threads)."""
    global _helpers, _helpers_pid
    with _helpers_lock:
        if _helpers_pid != os.getpid():
            _helpers, _helpers_pid = [], os.getpid()
            for n in range(helper_threads()):
                jobs: queue.SimpleQueue = queue.SimpleQueue()
                threading.Thread(target=_helper_loop, args=(jobs,), daemon=True,
                                 name=f"xla_gpu BLAS helper {n}").start()
                _helpers.append(jobs)
        return _helpers


def _helper_loop(jobs: queue.SimpleQueue) -> None:
    while True:
        jobs.get().help()


def _panel_side(a: np.ndarray, b: np.ndarray) -> bool | None:
    """How to split a [1, m, k] x [1, k, n] product: True for row panels,
    False for column panels, None when the side is too short for two.

    Row panels pack all of b again per panel, column panels all of a:
    panels across the longer side of the output re-pack the smaller
    operand (and keep a long side for BLAS's blocking). A transposed b
    packs slower (measured: its row panels cost up to 1.3x a column split
    on AVX-512 kernels), so it counts twice."""
    m, n = a.shape[-2], b.shape[-1]
    rows = m > n * (2 if b.strides[-2] < b.strides[-1] else 1)
    if (m if rows else n) < 2 * _MIN_PANEL:
        return None
    return rows


def blas_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, after=None) -> None:
    """out[...] = a @ b for a [batch, m, k], b [batch, k, n] and out
    [batch, m, n] (numpy arrays that do not overlap `out`), BLAS on one
    thread, split over the helper threads when large. `after(index)` runs
    on each finished part `out[index]` (the whole, a batch or row panel
    `(lo:hi,)` / `(0, lo:hi)`, or a column panel `(0, :, lo:hi)`, on the
    thread that computed it, while the panel is still in its cache): a
    GEMM epilogue."""
    whole = (slice(None),)
    if a.shape[-2] * a.shape[-1] * b.shape[-1] <= OPENBLAS_ONE_THREAD_MACS or \
            not single_threaded_blas():
        np.matmul(a, b, out=out)
        if after is not None:
            after(whole)
        return
    try:
        batch, m, k = a.shape
        n = b.shape[-1]
        helpers = _helper_queues() if batch * m * n * k >= HOST_BLAS_SPLIT_MACS else []
        wanted = (len(helpers) + 1) * _PANELS_PER_THREAD
        if helpers and batch >= wanted:
            # Whole batch entries per panel.
            bounds = [batch * p // wanted for p in range(wanted + 1)]

            def run_panel(p: int) -> None:
                lo, hi = bounds[p], bounds[p + 1]
                np.matmul(a[lo:hi], b[lo:hi], out=out[lo:hi])
                if after is not None:
                    after((slice(lo, hi),))
        elif helpers and batch == 1 and (rows := _panel_side(a, b)) is not None:
            side = m if rows else n
            wanted = min(wanted, side // _MIN_PANEL)
            bounds = [side * p // wanted for p in range(wanted + 1)]

            def run_panel(p: int) -> None:
                part = slice(bounds[p], bounds[p + 1])
                index = (0, part) if rows else (0, slice(None), part)
                if rows:
                    np.matmul(a[0, part], b[0], out=out[index])
                else:
                    np.matmul(a[0], b[0, :, part], out=out[index])
                if after is not None:
                    after(index)
        else:
            np.matmul(a, b, out=out)
            if after is not None:
                after(whole)
            return
        split = _Split(run_panel, wanted)
        for jobs in helpers:
            jobs.put(split)
        try:
            split.work()
        finally:
            split.finish()
    finally:
        restore_blas_threads()

"""FFTs with XLA's `fft` semantics: numpy.fft on the cpu target, cuFFT
(through ctypes) on cuda.

HLO's fft transforms the last len(fft_length) (1 to 3) dimensions of its
operand; every dimension before them is a batch dimension:

    FFT    c64/c128 -> same type, same dims          forward, unnormalized
    IFFT   c64/c128 -> same type, same dims          inverse, scaled by 1/N
    RFFT   f32/f64  -> c64/c128, last dim n/2+1      forward of real data
    IRFFT  c64/c128 -> f32/f64,  last dim n          inverse to real data, 1/N

N is the product of fft_length. cuFFT's inverse transforms are
unnormalized: as XLA's FftThunk, the result is scaled by 1/N afterwards
(cuBLAS `scal` on the output, in chunks of at most 2^31-1 elements), and
a complex-to-real transform reads a copy of its input (cuFFT overwrites the
input of C2R/Z2D transforms; XLA's stream executor copies it into scratch
memory first, and so does this).

cuFFT reads packed row-major batches (`cufftMakePlanMany64` with the
embeddings of the operand's and result's last dimensions, stride 1 and
the distance between batches their product), so the operand and result
must have the default layout: the program compiler relayouts them with
copies when the HLO gives another layout (as XLA's layout assignment pins
fft to the default layout). The cpu target reads any layout through numpy
views.

Plans are created once per (fft type, lengths, batch, element type) and
CUDA stream (a plan's workspace and scratch must not be used by two
streams at once), and destroyed at exit; cuFFT allocates and owns each
plan's workspace.

cuFFT and cuBLAS are found (first hit wins) in: the pip wheels
(`nvidia/cufft/lib`, `nvidia/cublas/lib` as jax[cuda12] installs them,
`nvidia/cu13/lib` for CUDA 13), `$CUDA_HOME` / `$CUDA_PATH` /
`/usr/local/cuda`, then the system loader path.
"""

from __future__ import annotations

import atexit
import ctypes
import math
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import CudaError, CudaUnavailableError, HloError
from .buffers import ArrayRef
from .libraries import candidate_libraries

__all__ = ["FFT_TYPES", "FftConfig", "fft_reference", "run_fft", "prepare",
           "cufft_library", "cublas_library", "cufft_layout_error", "destroy_plans"]

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
_COMPLEX_OF = {"f32": "c64", "f64": "c128"}
_REAL_OF = {"c64": "f32", "c128": "f64"}


def fft_shape_error(fft_type: str, fft_length: tuple[int, ...], in_type: str,
                    in_dims: tuple[int, ...], out_type: str,
                    out_dims: tuple[int, ...]) -> str | None:
    """What is wrong with an fft of these shapes (XLA's shape inference for
    fft), None when it is well formed."""
    if fft_type not in FFT_TYPES:
        return f"unknown fft_type '{fft_type}' (expected one of {', '.join(FFT_TYPES)})"
    rank = len(fft_length)
    if not 1 <= rank <= 3:
        return f"fft_length has {rank} sizes; an fft transforms 1 to 3 dimensions"
    if any(n < 0 for n in fft_length):
        return f"negative fft_length {list(fft_length)}"
    if len(in_dims) < rank:
        return f"fft_length {list(fft_length)} needs an operand of rank >= {rank}, " \
               f"got {in_type}{list(in_dims)}"
    if len(out_dims) != len(in_dims):
        return f"the result {out_type}{list(out_dims)} has another rank than the operand " \
               f"{in_type}{list(in_dims)}"
    batch_in, batch_out = in_dims[:-rank], out_dims[:-rank]
    if batch_in != batch_out:
        return f"batch dimensions differ: operand {list(batch_in)}, result {list(batch_out)}"
    lengths = tuple(fft_length)
    half = lengths[:-1] + (lengths[-1] // 2 + 1,)
    if fft_type in ("FFT", "IFFT"):
        if in_type not in _REAL_OF:
            return f"{fft_type} needs a c64 or c128 operand, got {in_type}"
        expect_in, expect_out, expect_type = lengths, lengths, in_type
    elif fft_type == "RFFT":
        if in_type not in _COMPLEX_OF:
            return f"RFFT needs an f32 or f64 operand, got {in_type}"
        expect_in, expect_out, expect_type = lengths, half, _COMPLEX_OF[in_type]
    else:
        if in_type not in _REAL_OF:
            return f"IRFFT needs a c64 or c128 operand, got {in_type}"
        expect_in, expect_out, expect_type = half, lengths, _REAL_OF[in_type]
    if tuple(in_dims[-rank:]) != expect_in:
        return f"{fft_type} with fft_length {list(lengths)} needs the operand's last " \
               f"dimensions {list(expect_in)}, got {in_type}{list(in_dims)}"
    if out_type != expect_type or tuple(out_dims[-rank:]) != expect_out:
        return f"{fft_type} of {in_type}{list(in_dims)} with fft_length {list(lengths)} " \
               f"gives {expect_type}{list(batch_in) + list(expect_out)}, the result is " \
               f"{out_type}{list(out_dims)}"
    return None


@dataclass
class FftConfig:
    """One fft: its type, lengths (the transformed minor dimensions) and the
    operand and result arrays."""
    fft_type: str
    fft_length: tuple[int, ...]
    input: ArrayRef
    output: ArrayRef

    def __post_init__(self):
        self.fft_type = str(self.fft_type).upper()
        self.fft_length = tuple(int(n) for n in self.fft_length)
        problem = fft_shape_error(self.fft_type, self.fft_length, self.input.element_type,
                                  self.input.dims, self.output.element_type, self.output.dims)
        if problem is not None:
            raise HloError(problem)
        for what, ref in (("operand", self.input), ("result", self.output)):
            if ref.slice.size < ref.nbytes:
                raise HloError(f"the fft {what} {ref.describe()} needs {ref.nbytes} bytes, "
                               f"its slice {ref.slice} has {ref.slice.size}")

    @property
    def rank(self) -> int:
        return len(self.fft_length)

    @cached_property
    def batch(self) -> int:
        """The number of transforms: the product of the batch dimensions."""
        return math.prod(self.input.dims[:-self.rank])

    @cached_property
    def double_precision(self) -> bool:
        return self.input.element_type in ("f64", "c128")

    @property
    def inverse(self) -> bool:
        return self.fft_type in ("IFFT", "IRFFT")

    @cached_property
    def scale(self) -> int:
        """N: an inverse transform's result is divided by it."""
        return math.prod(self.fft_length)

    def plan_key(self) -> tuple:
        """What a cuFFT plan depends on (shared by every fft of this kind)."""
        return (self.fft_type, self.fft_length, self.batch, self.input.element_type)

    def to_dict(self) -> dict[str, Any]:
        return {"fft_type": self.fft_type, "fft_length": list(self.fft_length),
                "input": self.input.to_dict(), "output": self.output.to_dict()}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "FftConfig":
        return FftConfig(str(d["fft_type"]), tuple(int(n) for n in d["fft_length"]),
                         ArrayRef.from_dict(d["input"]), ArrayRef.from_dict(d["output"]))

    def describe(self) -> str:
        return (f"{self.fft_type} fft_length={{{','.join(map(str, self.fft_length))}}} "
                f"{self.input.describe()} -> {self.output.describe()} (batch={self.batch}; "
                f"in {self.input.slice}, out {self.output.slice})")


# -- numpy (the cpu target, and the reference) ---------------------------------


def fft_reference(config: FftConfig, operand: np.ndarray) -> np.ndarray:
    """The fft of `operand` (logical order) in the result's dtype and
    logical shape. Computed in the operand's precision (numpy keeps
    float32/complex64, as XLA:CPU's transforms do)."""
    out_dims, out_dtype = config.output.dims, config.output.dtype
    if config.output.num_elements == 0 or config.input.num_elements == 0:
        return np.zeros(out_dims, out_dtype)   # nothing to transform (a zero length)
    x = np.asarray(operand)
    axes = tuple(range(x.ndim - config.rank, x.ndim))
    lengths = config.fft_length
    if config.fft_type == "FFT":
        result = np.fft.fftn(x, s=lengths, axes=axes)
    elif config.fft_type == "IFFT":
        result = np.fft.ifftn(x, s=lengths, axes=axes)
    elif config.fft_type == "RFFT":
        result = np.fft.rfftn(x, s=lengths, axes=axes)
    else:
        result = np.fft.irfftn(x, s=lengths, axes=axes)
    return np.asarray(result).astype(out_dtype, copy=False)


def _run_numpy(ctx, config: FftConfig) -> None:
    result = fft_reference(config, ctx.array(config.input))
    ctx.array(config.output)[...] = result


def run_fft(ctx, config: FftConfig) -> None:
    if ctx.target == "cpu":
        _run_numpy(ctx, config)
    else:
        _run_cufft(ctx, config)


def cufft_layout_error(config: FftConfig) -> str | None:
    """Why cuFFT cannot run `config` as it lies in memory, None if it can:
    cuFFT reads packed row-major batches."""
    for what, ref in (("operand", config.input), ("result", config.output)):
        if not ref.is_row_major:
            return (f"cuFFT needs the fft {what} in the default (row-major) layout, got "
                    f"{ref.describe()}")
    a, b = config.input.slice, config.output.slice
    if a.allocation == b.allocation and a != b and \
            a.offset < b.offset + b.size and b.offset < a.offset + a.size:
        return f"the fft operand {a} and result {b} overlap without being the same buffer"
    return None


# -- cuFFT / cuBLAS (cuda) ------------------------------------------------------

# cufftType
_CUFFT_R2C, _CUFFT_C2R, _CUFFT_C2C = 0x2A, 0x2C, 0x29
_CUFFT_D2Z, _CUFFT_Z2D, _CUFFT_Z2Z = 0x6A, 0x6C, 0x69
_CUFFT_FORWARD, _CUFFT_INVERSE = -1, 1
_CUFFT_TYPES = {("FFT", False): _CUFFT_C2C, ("IFFT", False): _CUFFT_C2C,
                ("RFFT", False): _CUFFT_R2C, ("IRFFT", False): _CUFFT_C2R,
                ("FFT", True): _CUFFT_Z2Z, ("IFFT", True): _CUFFT_Z2Z,
                ("RFFT", True): _CUFFT_D2Z, ("IRFFT", True): _CUFFT_Z2D}
_CUFFT_RESULTS = {1: "CUFFT_INVALID_PLAN", 2: "CUFFT_ALLOC_FAILED", 3: "CUFFT_INVALID_TYPE",
                  4: "CUFFT_INVALID_VALUE", 5: "CUFFT_INTERNAL_ERROR",
                  6: "CUFFT_EXEC_FAILED", 7: "CUFFT_SETUP_FAILED", 8: "CUFFT_INVALID_SIZE",
                  9: "CUFFT_UNALIGNED_DATA", 11: "CUFFT_INVALID_DEVICE",
                  13: "CUFFT_NO_WORKSPACE", 14: "CUFFT_NOT_IMPLEMENTED",
                  16: "CUFFT_NOT_SUPPORTED", 17: "CUFFT_MISSING_DEPENDENCY"}
# cuBLAS's scal takes a 32-bit element count.
_MAX_BLAS_COUNT = (1 << 31) - 1

_CUFFT_NAMES = ("libcufft.so.12", "libcufft.so.11", "libcufft.so.10", "libcufft.so")
_CUBLAS_NAMES = ("libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so")


# The search (runtime.libraries); a module name of its own so that tests
# can replace it.
_candidate_libraries = candidate_libraries


_load_lock = threading.Lock()
_libraries: dict[str, ctypes.CDLL] = {}


def _load(what: str, names: tuple[str, ...], wheel: str, install: str) -> ctypes.CDLL:
    with _load_lock:
        if what in _libraries:
            return _libraries[what]
        errors = []
        for candidate in _candidate_libraries(names, wheel):
            try:
                lib = ctypes.CDLL(str(candidate))
            except OSError as e:
                errors.append(f"{candidate}: {e}")
                continue
            _libraries[what] = lib
            return lib
        raise CudaUnavailableError(f"{what} not found (install {install}, jax[cuda12] or "
                                   "a CUDA toolkit); tried " + "; ".join(errors[:4]))


def cufft_library() -> ctypes.CDLL:
    """libcufft, loaded once; CudaUnavailableError when none is found."""
    return _load("cuFFT", _CUFFT_NAMES, "cufft", "nvidia-cufft (CUDA 13) or nvidia-cufft-cu12")


def cublas_library() -> ctypes.CDLL:
    """libcublas (the inverse transforms' 1/N scaling), loaded once."""
    return _load("cuBLAS", _CUBLAS_NAMES, "cublas",
                 "nvidia-cublas (CUDA 13) or nvidia-cublas-cu12")


def _cufft_check(call: str, status: int) -> None:
    if status != 0:
        raise CudaError(f"{call} failed: {_CUFFT_RESULTS.get(status, 'cufftResult')} "
                        f"({status})")


def _cublas_check(call: str, status: int) -> None:
    if status != 0:
        raise CudaError(f"{call} failed: cublasStatus {status}")


class _CuFFT:
    """libcufft with typed entry points."""

    def __init__(self):
        lib = cufft_library()
        self.lib = lib
        vp, i64 = ctypes.c_void_p, ctypes.c_longlong
        p64 = ctypes.POINTER(i64)
        for name, args in {
                "cufftCreate": [ctypes.POINTER(ctypes.c_int)],
                "cufftMakePlanMany64": [ctypes.c_int, ctypes.c_int, p64, p64, i64, i64, p64,
                                        i64, i64, ctypes.c_int, i64,
                                        ctypes.POINTER(ctypes.c_size_t)],
                "cufftSetStream": [ctypes.c_int, vp],
                "cufftDestroy": [ctypes.c_int],
                "cufftExecC2C": [ctypes.c_int, vp, vp, ctypes.c_int],
                "cufftExecZ2Z": [ctypes.c_int, vp, vp, ctypes.c_int],
                "cufftExecR2C": [ctypes.c_int, vp, vp],
                "cufftExecD2Z": [ctypes.c_int, vp, vp],
                "cufftExecC2R": [ctypes.c_int, vp, vp],
                "cufftExecZ2D": [ctypes.c_int, vp, vp]}.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int


class _CuBLAS:
    """One cuBLAS handle and the four `scal` routines an inverse fft needs:
    S (f32), D (f64), Cs (c64 by a real), Zd (c128 by a real)."""

    def __init__(self):
        lib = cublas_library()
        self.lib = lib
        vp = ctypes.c_void_p
        for name, args in {
                "cublasCreate_v2": [ctypes.POINTER(vp)],
                "cublasDestroy_v2": [vp],
                "cublasSetStream_v2": [vp, vp],
                "cublasSscal_v2": [vp, ctypes.c_int, vp, vp, ctypes.c_int],
                "cublasDscal_v2": [vp, ctypes.c_int, vp, vp, ctypes.c_int],
                "cublasCsscal_v2": [vp, ctypes.c_int, vp, vp, ctypes.c_int],
                "cublasZdscal_v2": [vp, ctypes.c_int, vp, vp, ctypes.c_int]}.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
        self.handle = vp()
        _cublas_check("cublasCreate", lib.cublasCreate_v2(ctypes.byref(self.handle)))
        self.lock = threading.Lock()

    def scale(self, pointer: int, element_type: str, count: int, factor: float,
              stream: int) -> None:
        """x *= factor for `count` elements of `element_type` at `pointer`."""
        routine, scalar, itemsize = {
            "f32": (self.lib.cublasSscal_v2, ctypes.c_float, 4),
            "f64": (self.lib.cublasDscal_v2, ctypes.c_double, 8),
            "c64": (self.lib.cublasCsscal_v2, ctypes.c_float, 8),
            "c128": (self.lib.cublasZdscal_v2, ctypes.c_double, 16)}[element_type]
        alpha = scalar(factor)
        with self.lock:
            _cublas_check("cublasSetStream", self.lib.cublasSetStream_v2(
                self.handle, ctypes.c_void_p(stream)))
            for offset in range(0, count, _MAX_BLAS_COUNT):
                chunk = min(_MAX_BLAS_COUNT, count - offset)
                _cublas_check("cublas scal", routine(
                    self.handle, chunk, ctypes.byref(alpha),
                    ctypes.c_void_p(pointer + offset * itemsize), 1))


class _Plan:
    """A cuFFT plan (its workspace owned by cuFFT) and, for complex-to-real
    transforms, the scratch copy of the input cuFFT may overwrite. One host
    thread uses a plan at a time (cuFFT plans are not thread-safe), on one
    stream (its workspace and scratch are reused in stream order)."""

    def __init__(self, cufft: _CuFFT, config: FftConfig, stream: int):
        self.cufft = cufft
        self.key = (config.plan_key(), stream)
        self.lock = threading.Lock()
        self.handle = ctypes.c_int(0)
        self.scratch = None
        rank = config.rank
        i64 = ctypes.c_longlong
        n = (i64 * rank)(*config.fft_length)
        in_embed = (i64 * rank)(*config.input.dims[-rank:])
        out_embed = (i64 * rank)(*config.output.dims[-rank:])
        in_distance = math.prod(config.input.dims[-rank:])
        out_distance = math.prod(config.output.dims[-rank:])
        work = ctypes.c_size_t(0)
        lib = cufft.lib
        _cufft_check("cufftCreate", lib.cufftCreate(ctypes.byref(self.handle)))
        try:
            _cufft_check("cufftMakePlanMany64", lib.cufftMakePlanMany64(
                self.handle, rank, n, in_embed, 1, in_distance, out_embed, 1, out_distance,
                _CUFFT_TYPES[(config.fft_type, config.double_precision)], config.batch,
                ctypes.byref(work)))
        except CudaError as e:
            lib.cufftDestroy(self.handle)
            raise CudaError(f"{e} for {config.describe()}") from None
        self.workspace_bytes = int(work.value)
        if config.fft_type == "IRFFT":
            from .cuda import DeviceArray
            self.scratch = DeviceArray((config.input.nbytes,), np.uint8)

    def destroy(self) -> None:
        if self.handle.value:
            self.cufft.lib.cufftDestroy(self.handle)
            self.handle = ctypes.c_int(0)
        self.scratch = None


_state_lock = threading.Lock()
_cufft_instance: _CuFFT | None = None
_cublas_instance: _CuBLAS | None = None
_plans: dict[tuple, _Plan] = {}


def _cufft() -> _CuFFT:
    global _cufft_instance
    with _state_lock:
        if _cufft_instance is None:
            _cufft_instance = _CuFFT()
        return _cufft_instance


def _cublas() -> _CuBLAS:
    global _cublas_instance
    with _state_lock:
        if _cublas_instance is None:
            _cublas_instance = _CuBLAS()
            atexit.register(_destroy_cublas)
        return _cublas_instance


def prepare(config: FftConfig, stream: int = 0) -> _Plan:
    """The cuFFT plan of `config` on `stream`, created once per plan key and
    stream (in the primary context; not while a CUDA graph is being
    captured)."""
    from .cuda import current_context
    cufft = _cufft()
    key = (config.plan_key(), int(stream))
    with _state_lock:
        plan = _plans.get(key)
    if plan is not None:
        return plan
    with current_context():
        if config.inverse:   # cuBLAS first: a missing library leaks no plan
            _cublas()
        plan = _Plan(cufft, config, int(stream))
    with _state_lock:
        existing = _plans.get(key)
        if existing is not None:   # another thread made it meanwhile
            plan.destroy()
            return existing
        if not _plans:
            atexit.register(destroy_plans)
        _plans[key] = plan
    return plan


def destroy_plans() -> None:
    """Destroys every cached cuFFT plan (at exit; errors ignored: the
    process is going away)."""
    with _state_lock:
        plans = list(_plans.values())
        _plans.clear()
    for plan in plans:
        try:
            plan.destroy()
        except Exception:
            pass


def _destroy_cublas() -> None:
    global _cublas_instance
    instance, _cublas_instance = _cublas_instance, None
    if instance is not None:
        try:
            instance.lib.cublasDestroy_v2(instance.handle)
        except Exception:
            pass


def _run_cufft(ctx, config: FftConfig) -> None:
    problem = cufft_layout_error(config)
    if problem is not None:
        raise CudaError(problem)
    stream = int(ctx.stream or 0)
    if config.output.num_elements == 0:
        return
    if config.input.num_elements == 0:   # a zero fft length: the result is zeros
        ctx.memset(config.output.slice, 0, 1, config.output.nbytes)
        return
    from .cuda import _check, _driver, current_context
    plan = prepare(config, stream)
    lib = plan.cufft.lib
    vp = ctypes.c_void_p
    source = ctx.pointer(config.input.slice)
    destination = ctx.pointer(config.output.slice)
    with current_context(), plan.lock:
        _cufft_check("cufftSetStream", lib.cufftSetStream(plan.handle, vp(stream)))
        if plan.scratch is not None and source != destination:
            _check("cuMemcpyDtoDAsync", _driver().cuMemcpyDtoDAsync(
                plan.scratch.ptr, source, config.input.nbytes, stream))
            source = plan.scratch.ptr
        double = config.double_precision
        kind = config.fft_type
        if kind in ("FFT", "IFFT"):
            direction = _CUFFT_FORWARD if kind == "FFT" else _CUFFT_INVERSE
            execute = lib.cufftExecZ2Z if double else lib.cufftExecC2C
            _cufft_check(execute.__name__, execute(plan.handle, vp(source), vp(destination),
                                                   direction))
        else:
            execute = {("RFFT", False): lib.cufftExecR2C, ("RFFT", True): lib.cufftExecD2Z,
                       ("IRFFT", False): lib.cufftExecC2R,
                       ("IRFFT", True): lib.cufftExecZ2D}[(kind, double)]
            _cufft_check(execute.__name__, execute(plan.handle, vp(source), vp(destination)))
    if config.inverse:
        with current_context():
            _cublas().scale(destination, config.output.element_type,
                            config.output.num_elements, 1.0 / config.scale, stream)

"""GEMMs with XLA's dot semantics: numpy's BLAS on the cpu target, cuBLASLt
(through ctypes) on cuda.

    out = activation(alpha * dot_general(lhs, rhs) + beta * c + bias)

`dot_general` as HLO defines it: batch dimensions paired between the
operands and kept first in the result, contracting dimensions summed, the
remaining (free) dimensions of lhs then rhs. The result's element type is
the dot's (its preferred element type): bf16/f16/f8 operands are multiplied
and accumulated in f32 and rounded once, integers accumulate in 64 bits and
wrap to the result's width, f64 and complex stay in their type.

Operands may have any layout: the cpu target reads them through numpy views
in logical order; cuBLASLt gets row- or column-major matrix layouts with a
batch stride when the layout allows it (`cublas_plan`), and the compiler
inserts a relayout kernel when it does not.

cuBLASLt is found (first hit wins) in: the `nvidia-cublas` wheels
(`nvidia/cublas/lib`, as jax[cuda] installs them), `$CUDA_HOME` /
`$CUDA_PATH` / `/usr/local/cuda`, then the system loader path.
"""

from __future__ import annotations

import ctypes
import math
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CudaError, CudaUnavailableError, HloError
from ..hlo.cublas import EPILOGUES as CUBLAS_EPILOGUES
from ..hlo.cublas import activation, apply_activation
from .buffers import ArrayRef, BufferSlice
from .host_blas import (OPENBLAS_ONE_THREAD_MACS, blas_matmul, restore_blas_threads,
                        single_threaded_blas)
from .libraries import candidate_libraries

__all__ = ["GemmConfig", "run_gemm", "gemm_reference", "EPILOGUES", "cublaslt_library",
           "cublas_plan", "CublasPlanError"]

# XLA's GemmBackendConfig epilogues that have a single output.
EPILOGUES = tuple(name for name, kind in CUBLAS_EPILOGUES.items() if not kind.aux)

_F32_ACCUMULATED = frozenset({"f16", "bf16", "f32", "f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz",
                              "f8e5m2fnuz", "f8e4m3fnuz", "f8e4m3", "f8e3m4"})


@dataclass
class GemmConfig:
    lhs: ArrayRef
    rhs: ArrayRef
    out: ArrayRef
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()
    lhs_contracting: tuple[int, ...] = ()
    rhs_contracting: tuple[int, ...] = ()
    alpha: complex = 1.0
    beta: float = 0.0
    c: ArrayRef | None = None          # beta * c (XLA's output-aliased C operand)
    bias: ArrayRef | None = None       # broadcast over the result's leading dims
    epilogue: str = "DEFAULT"
    precision: str = "DEFAULT"         # the dot's operand precision (HIGHEST: no TF32)
    workspace: BufferSlice | None = None

    def __post_init__(self):
        if self.epilogue not in EPILOGUES:
            raise HloError(f"gemm epilogue {self.epilogue!r} is not supported "
                           f"(supported: {', '.join(EPILOGUES)})")
        if len(self.lhs_batch) != len(self.rhs_batch) or \
                len(self.lhs_contracting) != len(self.rhs_contracting):
            raise HloError("dot dimension numbers do not pair up: "
                           f"batch {self.lhs_batch}/{self.rhs_batch}, contracting "
                           f"{self.lhs_contracting}/{self.rhs_contracting}")

    @cached_property
    def lhs_free(self) -> tuple[int, ...]:
        used = set(self.lhs_batch) | set(self.lhs_contracting)
        return tuple(d for d in range(len(self.lhs.dims)) if d not in used)

    @cached_property
    def rhs_free(self) -> tuple[int, ...]:
        used = set(self.rhs_batch) | set(self.rhs_contracting)
        return tuple(d for d in range(len(self.rhs.dims)) if d not in used)

    @cached_property
    def output_groups(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The result's (batch, lhs free, rhs free) dimensions, in that order
        as dot_general lays the result out."""
        nb, nm = len(self.lhs_batch), len(self.lhs_free)
        n = len(self.out.dims)
        return tuple(range(nb)), tuple(range(nb, nb + nm)), tuple(range(nb + nm, n))

    @cached_property
    def bmnk(self) -> tuple[int, int, int, int]:
        """(batch, m, n, k) element counts."""
        def size(ref, dims):
            return math.prod(ref.dims[d] for d in dims)
        return (size(self.lhs, self.lhs_batch), size(self.lhs, self.lhs_free),
                size(self.rhs, self.rhs_free), size(self.lhs, self.lhs_contracting))

    def to_dict(self) -> dict[str, Any]:
        alpha = complex(self.alpha)
        return {"lhs": self.lhs.to_dict(), "rhs": self.rhs.to_dict(), "out": self.out.to_dict(),
                "lhs_batch": list(self.lhs_batch), "rhs_batch": list(self.rhs_batch),
                "lhs_contracting": list(self.lhs_contracting),
                "rhs_contracting": list(self.rhs_contracting),
                "alpha": [alpha.real, alpha.imag], "beta": self.beta,
                "c": None if self.c is None else self.c.to_dict(),
                "bias": None if self.bias is None else self.bias.to_dict(),
                "epilogue": self.epilogue, "precision": self.precision,
                "workspace": None if self.workspace is None else self.workspace.to_list()}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "GemmConfig":
        def ref(x):
            return None if x is None else ArrayRef.from_dict(x)
        alpha = d.get("alpha", [1.0, 0.0])
        return GemmConfig(
            ArrayRef.from_dict(d["lhs"]), ArrayRef.from_dict(d["rhs"]), ArrayRef.from_dict(d["out"]),
            tuple(d["lhs_batch"]), tuple(d["rhs_batch"]), tuple(d["lhs_contracting"]),
            tuple(d["rhs_contracting"]), complex(alpha[0], alpha[1]), float(d.get("beta", 0.0)),
            ref(d.get("c")), ref(d.get("bias")), str(d.get("epilogue", "DEFAULT")),
            str(d.get("precision", "DEFAULT")),
            None if d.get("workspace") is None else BufferSlice.from_list(d["workspace"]))

    def describe(self) -> str:
        b, m, n, k = self.bmnk
        extras = []
        if complex(self.alpha) != 1:
            extras.append(f"alpha={complex(self.alpha).real:g}")
        if self.beta:
            extras.append(f"beta={self.beta:g}")
        if self.epilogue != "DEFAULT":
            extras.append(f"epilogue={self.epilogue}")
        return (f"{self.lhs.describe()} x {self.rhs.describe()} -> {self.out.describe()} "
                f"(batch={b} m={m} n={n} k={k}; lhs {self.lhs.slice}, rhs {self.rhs.slice}, "
                f"out {self.out.slice}{'; ' + ', '.join(extras) if extras else ''})")


# -- numpy (the cpu target, and the reference) ---------------------------------


def _compute_dtype(element_type: str) -> np.dtype:
    if element_type in _F32_ACCUMULATED:
        return np.dtype(np.float32)
    if element_type == "f64":
        return np.dtype(np.float64)
    if element_type == "c64":
        return np.dtype(np.complex64)
    if element_type == "c128":
        return np.dtype(np.complex128)
    return np.dtype(np.int64)          # integers and pred


def _to_type(value: np.ndarray, ref: ArrayRef) -> np.ndarray:
    """`value` (compute dtype) converted to `ref`'s storage, rounding floats
    once and wrapping integers to their width."""
    t = ref.element_type
    if t == "pred":
        return value != 0
    if t in ("s2", "s4", "u2", "u4"):
        bits = int(t[1:])
        wrapped = np.asarray(value, np.int64) & ((1 << bits) - 1)
        if t[0] == "s":
            wrapped = np.where(wrapped >= 1 << (bits - 1), wrapped - (1 << bits), wrapped)
        return wrapped.astype(ref.storage_dtype)
    if np.issubdtype(ref.storage_dtype, np.integer):
        return np.asarray(value, np.int64).astype(ref.storage_dtype)
    return np.asarray(value).astype(ref.storage_dtype)


def _as_matrices(config: GemmConfig, lhs: np.ndarray, rhs: np.ndarray) -> tuple:
    """The logical operands as [batch, m, k] and [batch, k, n] (views where
    the dimension order allows)."""
    batch, m, n, k = config.bmnk
    a = lhs.transpose(config.lhs_batch + config.lhs_free + config.lhs_contracting) \
        .reshape(batch, m, k)
    b = rhs.transpose(config.rhs_batch + config.rhs_contracting + config.rhs_free) \
        .reshape(batch, k, n)
    return a, b


def gemm_reference(config: GemmConfig, lhs: np.ndarray, rhs: np.ndarray,
                   c: np.ndarray | None = None, bias: np.ndarray | None = None) -> np.ndarray:
    """The result of `config` on logical numpy operands, in the output's
    storage dtype and logical shape."""
    compute = _compute_dtype(config.out.element_type)
    if config.out.element_type in _F32_ACCUMULATED and \
            _compute_dtype(config.lhs.element_type) == np.float64:
        compute = np.dtype(np.float64)
    a, b = _as_matrices(config, np.asarray(lhs).astype(compute),
                        np.asarray(rhs).astype(compute))
    result = np.matmul(a, b)   # integers: exact modulo 2^64, wrapped below
    result = result.reshape(config.out.dims)
    if complex(config.alpha) != 1:
        alpha = config.alpha if np.iscomplexobj(result) else complex(config.alpha).real
        result = result * np.asarray(alpha).astype(compute)
    if config.c is not None and config.beta:
        result = result + np.asarray(c).astype(compute) * compute.type(config.beta)
    if config.bias is not None:
        result = result + np.asarray(bias).astype(compute)
    result = activation(result, CUBLAS_EPILOGUES[config.epilogue].activation)
    return _to_type(result, config.out)


_DIRECT_TYPES = frozenset({"f32", "f64", "c64", "c128"})


def _is_plain_product(config: GemmConfig) -> bool:
    """A product numpy computes in the operands' own type with nothing
    after it (alpha 1, no c, bias or activation): matmul may write the
    output buffer directly."""
    t = config.out.element_type
    return t in _DIRECT_TYPES and config.lhs.element_type == t and \
        config.rhs.element_type == t and complex(config.alpha) == 1 and \
        (config.c is None or not config.beta) and config.bias is None and \
        CUBLAS_EPILOGUES[config.epilogue].activation is None


def _has_direct_epilogue(config: GemmConfig) -> bool:
    """An f32 / f64 product in the operands' own type whose epilogue
    (real alpha, beta * c, bias, activation) numpy can apply in place on
    the product in that type: the reference's arithmetic, in its order."""
    t = config.out.element_type
    return t in ("f32", "f64") and config.lhs.element_type == t and \
        config.rhs.element_type == t and complex(config.alpha).imag == 0 and \
        (config.c is None or config.c.element_type == t) and \
        (config.bias is None or config.bias.element_type == t)


def _product_views(ctx, config: GemmConfig) -> tuple | None:
    """The product's operands as [batch, m, k] and [batch, k, n] views and
    its row-major output as [batch, m, n], where the product can be written
    straight into the output (no conversions, no operand overlapping it;
    a plain product, or one with a direct epilogue applied after it in
    place); None when the general path must run."""
    if not (_is_plain_product(config) or _has_direct_epilogue(config)):
        return None
    out = ctx.array(config.out)
    if not out.flags.c_contiguous:
        return None
    a, b = _as_matrices(config, ctx.array(config.lhs), ctx.array(config.rhs))
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    batch, m, n, _ = config.bmnk
    return a, b, out.reshape(batch, m, n)


_NOT_PREPARED = object()


def _run_numpy(ctx, config: GemmConfig) -> None:
    # The views are made once a run: a gemm in a loop body runs on the same
    # buffers every iteration.
    views = ctx.host_views.get(id(config), _NOT_PREPARED)
    if views is _NOT_PREPARED:
        views = ctx.host_views[id(config)] = _product_views(ctx, config)
    if views is not None:
        if _is_plain_product(config):
            # BLAS on one thread, split over helper threads (runtime.host_blas).
            blas_matmul(*views)
        else:
            _run_with_epilogue(ctx, config, views)
        return
    c = ctx.array(config.c) if config.c is not None else None
    bias = ctx.array(config.bias) if config.bias is not None else None
    if c is not None:
        c = c.copy()   # may be the output's own buffer
    _, m, n, k = config.bmnk
    single = m * n * k > OPENBLAS_ONE_THREAD_MACS and single_threaded_blas()
    try:
        result = gemm_reference(config, ctx.array(config.lhs), ctx.array(config.rhs), c, bias)
    finally:
        if single:
            restore_blas_threads()
    ctx.array(config.out)[...] = result


def _run_with_epilogue(ctx, config: GemmConfig, views: tuple) -> None:
    """The product into the output and its epilogue in place on it: alpha,
    beta * c, the bias, the activation, in gemm_reference's order and type,
    with no temporary result and no
    separate pass over the output: each panel of a split product takes its
    epilogue on the thread that computed it."""
    a, b, out3 = views
    batch, m, n, _ = config.bmnk
    c = None
    if config.c is not None and config.beta:
        c = ctx.array(config.c)
        if np.may_share_memory(c, out3):
            c = c.copy()   # the output's own buffer: the product overwrites it
        c = c.reshape(batch, m, n)
    bias = ctx.array(config.bias) if config.bias is not None else None
    dtype = out3.dtype.type
    alpha = complex(config.alpha).real
    beta = dtype(config.beta)
    name = CUBLAS_EPILOGUES[config.epilogue].activation
    # A bias over the columns (the rhs free dimensions) is one row added to
    # every row of the [batch, m, n] output; others broadcast over the
    # output's logical shape, after the whole product.
    row = bias.reshape(n) if bias is not None and bias.size == n else None

    def epilogue(index) -> None:
        # In row blocks of about _EPILOGUE_BLOCK elements: each op of the
        # epilogue is a pass over the block, which stays in the core's cache
        # (a pass over the whole panel would go to memory every time). A
        # column panel (0, :, lo:hi) is a strided [m, hi - lo] block and
        # takes its part of the bias row.
        block = out3[index]
        width = block.shape[-1]
        rows = block.reshape(-1, width)
        c_rows = c[index].reshape(-1, width) if c is not None else None
        bias_row = row[index[2]] if row is not None and len(index) == 3 else row
        step = max(1, _EPILOGUE_BLOCK // max(width, 1))
        scratch = np.empty((min(step, len(rows)), width), out3.dtype) \
            if name is not None and name != "relu" else None
        for lo in range(0, len(rows), step):
            part = rows[lo:lo + step]
            if alpha != 1:
                np.multiply(part, dtype(alpha), out=part)
            if c_rows is not None:
                addend = c_rows[lo:lo + step]
                np.add(part, addend if beta == 1 else addend * beta, out=part)
            if bias_row is not None:
                np.add(part, bias_row, out=part)
            if name is not None:
                apply_activation(part, name,
                                 None if scratch is None else scratch[:len(part)])

    if bias is not None and row is None:
        blas_matmul(a, b, out3)
        out = out3.reshape(config.out.dims)
        if alpha != 1:
            np.multiply(out, dtype(alpha), out=out)
        if c is not None:
            np.add(out, c.reshape(out.shape) * beta, out=out)
        np.add(out, bias, out=out)
        if name is not None:
            apply_activation(out, name)
        return
    blas_matmul(a, b, out3, after=epilogue)


# Elements of the output one step of the in-place epilogue works on (f32:
# 256 KiB, within a core's L2).
_EPILOGUE_BLOCK = 1 << 16


def run_gemm(ctx, config: GemmConfig) -> None:
    if ctx.target == "cpu":
        _run_numpy(ctx, config)
    else:
        _run_cublaslt(ctx, config)


# -- cuBLASLt (cuda) -------------------------------------------------------------

# cudaDataType_t
_CUDA_TYPES = {"f32": 0, "f64": 1, "f16": 2, "s8": 3, "c64": 4, "c128": 5, "u8": 8,
               "s32": 10, "bf16": 14, "f8e4m3fn": 28, "f8e5m2": 29}
# cublasComputeType_t
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _COMPUTE_64F, _COMPUTE_32I = 68, 77, 70, 72
# cublasLtMatmulDescAttributes_t
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8
_DESC_BIAS_DATA_TYPE = 26
# cublasLtMatrixLayoutAttribute_t
_LAYOUT_BATCH_COUNT, _LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
# cublasLtEpilogue_t
_EPILOGUE_CODES = {"DEFAULT": 1, "RELU": 2, "BIAS": 4, "BIAS_RELU": 6, "GELU": 32,
                   "BIAS_GELU": 36}
_PREF_MAX_WORKSPACE_BYTES = 1
_OP_N, _OP_T = 0, 1

WORKSPACE_BYTES = 32 << 20        # what XLA reserves for cuBLASLt on Hopper


class CublasPlanError(ValueError):
    """The operands' layouts cannot be given to cuBLASLt as strided matrices."""


@dataclass(frozen=True)
class _Matrix:
    """A logical rows x cols matrix (batched) as cuBLASLt sees memory:
    stored row-major (`row_major`) or column-major, with leading dimension
    `ld` and `batch_stride` elements between matrices."""
    rows: int
    cols: int
    ld: int
    row_major: bool
    batch_stride: int


@dataclass(frozen=True)
class _Operand:
    """What cuBLASLt is given for one operand: the op (N or T) and the
    column-major layout of the stored matrix."""
    op: int
    rows: int
    cols: int
    ld: int
    batch_stride: int


def element_strides(ref: ArrayRef) -> list[int]:
    """Element strides of each logical dimension in the physical layout."""
    strides = [0] * len(ref.dims)
    step = 1
    for d in reversed(ref.major_to_minor):
        strides[d] = step
        step *= ref.dims[d]
    return strides


def collapsed_stride(ref: ArrayRef, dims: tuple[int, ...], strides: list[int]) -> int | None:
    """The stride of `dims` collapsed into one dimension (row-major among
    themselves, contiguous in memory), None when they do not collapse."""
    live = [d for d in dims if ref.dims[d] != 1]
    if not live:
        return 0
    for a, b in zip(live, live[1:]):
        if strides[a] != strides[b] * ref.dims[b]:
            return None
    return strides[live[-1]]


def _matrix(ref: ArrayRef, batch: tuple[int, ...], rows: tuple[int, ...],
            cols: tuple[int, ...]) -> _Matrix:
    strides = element_strides(ref)
    r, c = math.prod(ref.dims[d] for d in rows), math.prod(ref.dims[d] for d in cols)
    rs, cs = collapsed_stride(ref, rows, strides), collapsed_stride(ref, cols, strides)
    bs = collapsed_stride(ref, batch, strides)
    if rs is None or cs is None or bs is None:
        raise CublasPlanError(f"{ref.describe()}: dimensions {rows}/{cols}/{batch} do not "
                              "collapse into a strided matrix")
    if c == 1 or cs == 1:
        return _Matrix(r, c, max(rs, c, 1) if r > 1 else max(c, 1), True, bs)
    if r == 1 or rs == 1:
        return _Matrix(r, c, max(cs, r, 1) if c > 1 else max(r, 1), False, bs)
    raise CublasPlanError(f"{ref.describe()}: neither rows nor columns are contiguous")


def _as_operand(x: _Matrix, transposed: bool) -> _Operand:
    """cuBLASLt's view of X (or X^T when `transposed`): column-major
    storage plus an op."""
    if x.row_major:   # memory holds X^T column-major (cols x rows)
        return _Operand(_OP_N if transposed else _OP_T, x.cols, x.rows, x.ld, x.batch_stride)
    return _Operand(_OP_T if transposed else _OP_N, x.rows, x.cols, x.ld, x.batch_stride)


def cublas_plan(config: GemmConfig) -> tuple[_Operand, _Operand, _Operand, bool]:
    """cuBLASLt operands (first, second, result) and whether the operands
    are swapped (a row-major result D is computed as D^T = B^T A^T, column
    major). Raises CublasPlanError when a layout is not a strided matrix or
    the types have no cuBLASLt kernel."""
    for ref in (config.lhs, config.rhs, config.out):
        if ref.element_type not in _CUDA_TYPES:
            raise CublasPlanError(f"cuBLASLt has no {ref.element_type} GEMM")
    a = _matrix(config.lhs, config.lhs_batch, config.lhs_free, config.lhs_contracting)
    b = _matrix(config.rhs, config.rhs_batch, config.rhs_contracting, config.rhs_free)
    groups = config.output_groups
    d = _matrix(config.out, *groups)
    if config.c is not None and _matrix(config.c, *groups) != d:
        raise CublasPlanError("the C operand's layout differs from the output's")
    if d.row_major:
        result = _Operand(_OP_N, d.cols, d.rows, d.ld, d.batch_stride)
        return _as_operand(b, True), _as_operand(a, True), result, True
    if config.bias is not None:
        raise CublasPlanError("a bias epilogue needs a row-major result")
    result = _Operand(_OP_N, d.rows, d.cols, d.ld, d.batch_stride)
    return _as_operand(a, False), _as_operand(b, False), result, False


_lt_lock = threading.Lock()
_lt: Any = None


def _candidate_libraries() -> list[Path]:
    return candidate_libraries(("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11",
                                "libcublasLt.so"), "cublas")


def cublaslt_library() -> ctypes.CDLL:
    """libcublasLt, loaded once; CudaUnavailableError when none is found."""
    global _lt
    with _lt_lock:
        if _lt is not None:
            return _lt
        errors = []
        for candidate in _candidate_libraries():
            try:
                _lt = ctypes.CDLL(str(candidate))
                return _lt
            except OSError as e:
                errors.append(f"{candidate}: {e}")
        raise CudaUnavailableError("cuBLASLt not found (install nvidia-cublas-cu12, "
                                   "jax[cuda12] or a CUDA toolkit); tried "
                                   + "; ".join(errors[:4]))


class _Lt:
    """One cuBLASLt handle with typed entry points."""

    def __init__(self):
        lib = cublaslt_library()
        self.lib = lib
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, args in {
                "cublasLtCreate": [ctypes.POINTER(vp)],
                "cublasLtMatmulDescCreate": [ctypes.POINTER(vp), ctypes.c_int, ctypes.c_int],
                "cublasLtMatmulDescDestroy": [vp],
                "cublasLtMatmulDescSetAttribute": [vp, ctypes.c_int, vp, sz],
                "cublasLtMatrixLayoutCreate": [ctypes.POINTER(vp), ctypes.c_int, ctypes.c_uint64,
                                               ctypes.c_uint64, ctypes.c_int64],
                "cublasLtMatrixLayoutDestroy": [vp],
                "cublasLtMatrixLayoutSetAttribute": [vp, ctypes.c_int, vp, sz],
                "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(vp)],
                "cublasLtMatmulPreferenceDestroy": [vp],
                "cublasLtMatmulPreferenceSetAttribute": [vp, ctypes.c_int, vp, sz],
                "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, ctypes.c_int,
                                                   vp, ctypes.POINTER(ctypes.c_int)],
                "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp,
                                   sz, vp]}.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
        self.handle = vp()
        self.check("cublasLtCreate", lib.cublasLtCreate(ctypes.byref(self.handle)))
        self.plans: dict = {}

    @staticmethod
    def check(call: str, status: int) -> None:
        if status != 0:
            raise CudaError(f"{call} failed: cublasStatus {status}")


# cublasLtMatmulHeuristicResult_t: algo (8 x uint64), workspaceSize, state,
# wavesCount, reserved[4].
class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t),
                ("state", ctypes.c_int), ("wavesCount", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


_lt_handle: _Lt | None = None


def _lt_instance() -> _Lt:
    """The process's cuBLASLt handle (created on first use)."""
    global _lt_handle
    if _lt_handle is None:
        _lt_handle = _Lt()
    return _lt_handle


def _compute_type(config: GemmConfig) -> tuple[int, int, Any]:
    """(cublasComputeType, scale cudaDataType, ctypes scalar type)."""
    t = config.out.element_type
    if t in ("f64", "c128"):
        return _COMPUTE_64F, _CUDA_TYPES[t], ctypes.c_double
    if t == "s32":
        return _COMPUTE_32I, _CUDA_TYPES["s32"], ctypes.c_int32
    fast = config.precision not in ("HIGHEST",) and config.lhs.element_type == "f32"
    scale = _CUDA_TYPES["c64"] if t == "c64" else _CUDA_TYPES["f32"]
    return (_COMPUTE_32F_FAST_TF32 if fast else _COMPUTE_32F), scale, ctypes.c_float


class _Plan:
    """The descriptors of one GEMM, built once and reused."""

    def __init__(self, lt: _Lt, config: GemmConfig):
        self.config = config
        first, second, result, self.swapped = cublas_plan(config)
        batch = config.bmnk[0]
        compute, scale, self.scalar = _compute_type(config)
        vp = ctypes.c_void_p
        self.lt = lt
        self.desc = vp()
        lt.check("cublasLtMatmulDescCreate",
                 lt.lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), compute, scale))
        set_desc = lt.lib.cublasLtMatmulDescSetAttribute
        self._set(set_desc, self.desc, _DESC_TRANSA, ctypes.c_int32(first.op))
        self._set(set_desc, self.desc, _DESC_TRANSB, ctypes.c_int32(second.op))
        self.layouts = []
        in_types = (config.rhs, config.lhs) if self.swapped else (config.lhs, config.rhs)

        def layout(ref: ArrayRef, m: _Operand) -> ctypes.c_void_p:
            handle = vp()
            lt.check("cublasLtMatrixLayoutCreate", lt.lib.cublasLtMatrixLayoutCreate(
                ctypes.byref(handle), _CUDA_TYPES[ref.element_type], m.rows, m.cols, m.ld))
            if batch > 1:
                setter = lt.lib.cublasLtMatrixLayoutSetAttribute
                self._set(setter, handle, _LAYOUT_BATCH_COUNT, ctypes.c_int32(batch))
                self._set(setter, handle, _LAYOUT_STRIDED_BATCH_OFFSET,
                          ctypes.c_int64(m.batch_stride))
            self.layouts.append(handle)
            return handle

        self.a = layout(in_types[0], first)
        self.b = layout(in_types[1], second)
        self.d = layout(config.out, result)
        self.c = self.d
        epilogue = _EPILOGUE_CODES.get(config.epilogue)
        if epilogue is None:
            raise CudaError(f"cuBLASLt has no {config.epilogue} epilogue")
        self._set(set_desc, self.desc, _DESC_EPILOGUE, ctypes.c_int32(epilogue))
        pref = vp()
        lt.check("cublasLtMatmulPreferenceCreate",
                 lt.lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)))
        workspace = 0 if config.workspace is None else config.workspace.size
        self._set(lt.lib.cublasLtMatmulPreferenceSetAttribute, pref, _PREF_MAX_WORKSPACE_BYTES,
                  ctypes.c_uint64(workspace))
        heuristic = _Heuristic()
        found = ctypes.c_int(0)
        lt.check("cublasLtMatmulAlgoGetHeuristic", lt.lib.cublasLtMatmulAlgoGetHeuristic(
            lt.handle, self.desc, self.a, self.b, self.c, self.d, pref, 1,
            ctypes.byref(heuristic), ctypes.byref(found)))
        lt.lib.cublasLtMatmulPreferenceDestroy(pref)
        if found.value < 1:
            raise CudaError(f"cuBLASLt found no algorithm for {config.describe()}")
        self.algo = heuristic
        alpha = complex(config.alpha)
        if config.out.element_type in ("c64", "c128"):
            self.alpha = (self.scalar * 2)(alpha.real, alpha.imag)
            self.beta = (self.scalar * 2)(config.beta if config.c is not None else 0.0, 0)
        else:
            beta = config.beta if config.c is not None else 0.0
            if self.scalar is ctypes.c_int32:
                self.alpha = (self.scalar * 1)(int(alpha.real))
                self.beta = (self.scalar * 1)(int(beta))
            else:
                self.alpha = (self.scalar * 1)(alpha.real)
                self.beta = (self.scalar * 1)(beta)

    def _set(self, setter, handle, attribute: int, value) -> None:
        self.lt.check("cublasLt set attribute", setter(handle, attribute, ctypes.byref(value),
                                                       ctypes.sizeof(value)))

    def set_bias(self, pointer: int) -> None:
        self._set(self.lt.lib.cublasLtMatmulDescSetAttribute, self.desc, _DESC_BIAS_POINTER,
                  ctypes.c_void_p(pointer))


def prepare(config: GemmConfig) -> "_Plan":
    """The cuBLASLt plan of `config` (handle, descriptors, algorithm),
    built once per config; outside any graph capture."""
    lt = _lt_instance()
    key = id(config)
    plan = lt.plans.get(key)
    if plan is None or plan.config is not config:
        plan = lt.plans[key] = _Plan(lt, config)
    return plan


def _run_cublaslt(ctx, config: GemmConfig) -> None:
    lt = _lt_instance()
    plan = prepare(config)
    if config.bias is not None:
        plan.set_bias(ctx.pointer(config.bias.slice))
    out = ctx.pointer(config.out.slice)
    c = ctx.pointer(config.c.slice) if config.c is not None else out
    if config.c is not None and c != out:
        ctx.copy(config.out.slice, config.c.slice, config.out.nbytes)
    workspace = ctx.pointer(config.workspace) if config.workspace is not None else 0
    ws_size = config.workspace.size if config.workspace is not None else 0
    first, second = config.lhs.slice, config.rhs.slice
    if plan.swapped:
        first, second = second, first
    vp = ctypes.c_void_p
    lt.check("cublasLtMatmul", lt.lib.cublasLtMatmul(
        lt.handle, plan.desc, ctypes.addressof(plan.alpha), vp(ctx.pointer(first)),
        plan.a, vp(ctx.pointer(second)), plan.b, ctypes.addressof(plan.beta),
        vp(out), plan.c, vp(out), plan.d, ctypes.byref(plan.algo.algo), vp(workspace),
        ws_size, vp(int(ctx.stream or 0))))

"""NCCL through ctypes: the collectives of a program run on the cuda target.

The library is libnccl.so.2 of the `nvidia-nccl-cu13` wheel (the `nccl`
extra: `pip install xla_gpu[nccl]`), looked for where the runtime looks for
the other CUDA libraries (`libraries.candidate_libraries`: the wheels'
`nvidia/nccl/lib`, the toolkit, the system loader); $XLA_GPU_NCCL_LIBRARY
names a file to load instead. Without it, NcclUnavailableError.

One device per GPU: device d of a run is rank `group.index(d)` of its
group's clique and runs on GPU d. A clique is made once per process with
ncclCommInitAll over its GPUs and kept (communicators are costly to make;
XLA keeps its cliques too). NCCL allows one rank per GPU in a communicator:
a clique that would put N ranks on one GPU is refused before NCCL is called
(`check_one_rank_per_gpu`), naming the GPU and its ranks.

What a collective thunk does on one rank is a list of `NcclOp`s (plain
data, built without a GPU: the tests read them); `run_ops` issues them in order on
a stream: local copies and zero fills through the driver, each run of NCCL
calls in one ncclGroupStart / ncclGroupEnd.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from ..errors import CudaError, CudaUnavailableError, UnsupportedError
from .libraries import candidate_libraries

__all__ = ["NcclError", "NcclUnavailableError", "nccl_library", "nccl_version",
           "error_string", "NcclOp", "reduction_call", "movement_type",
           "check_one_rank_per_gpu", "communicator", "run_ops", "gather_blocks",
           "split_blocks", "RESULT_NAMES", "DATA_TYPES", "REDUCTION_OPS"]

# ncclResult_t
RESULT_NAMES = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError",
                3: "ncclInternalError", 4: "ncclInvalidArgument", 5: "ncclInvalidUsage",
                6: "ncclRemoteError", 7: "ncclInProgress", 8: "ncclTimeout"}
INVALID_USAGE = 5

# ncclDataType_t
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16, \
    FLOAT8E4M3, FLOAT8E5M2 = range(12)
# ncclRedOp_t
SUM, PROD, MAX, MIN = range(4)

# Our element types NCCL reduces natively: (ncclDataType_t, NCCL values
# per element). A complex number is two reals: sums add them pairwise.
DATA_TYPES: dict[str, tuple[int, int]] = {
    "s8": (INT8, 1), "u8": (UINT8, 1), "s32": (INT32, 1), "u32": (UINT32, 1),
    "s64": (INT64, 1), "u64": (UINT64, 1), "f16": (FLOAT16, 1), "bf16": (BFLOAT16, 1),
    "f32": (FLOAT32, 1), "f64": (FLOAT64, 1), "f8e4m3fn": (FLOAT8E4M3, 1),
    "f8e5m2": (FLOAT8E5M2, 1), "c64": (FLOAT32, 2), "c128": (FLOAT64, 2),
    # pred is one byte holding 0 or 1: its or / and are max / min of u8.
    "pred": (UINT8, 1)}
REDUCTION_OPS = {"sum": SUM, "product": PROD, "max": MAX, "min": MIN}
_PRED_OPS = {"sum": MAX, "max": MAX, "or": MAX, "product": MIN, "min": MIN, "and": MIN}
_SUB_BYTE = ("s2", "s4", "u2", "u4")


class NcclError(CudaError):
    """An NCCL call failed (or would: N ranks on one GPU); names the call,
    NCCL's result and its message."""

    def __init__(self, call: str, result: int, message: str):
        self.call, self.result = call, int(result)
        name = RESULT_NAMES.get(self.result, f"ncclResult {self.result}")
        super().__init__(f"{call} failed: {name}: {message}")


class NcclUnavailableError(CudaUnavailableError):
    """libnccl could not be loaded."""


# -- what NCCL can compute ----------------------------------------------------------


def reduction_call(element_type: str, reduction: str) -> tuple[int, int, int]:
    """(ncclDataType_t, ncclRedOp_t, NCCL values per element) of a `reduction`
    (sum, product, min, max, and, or) over `element_type`; UnsupportedError
    for what NCCL cannot reduce."""
    if element_type == "pred":
        return UINT8, _PRED_OPS[reduction], 1
    where = f"an NCCL {reduction} reduction over {element_type}"
    if element_type in _SUB_BYTE:
        raise UnsupportedError(f"{where}: NCCL has no sub-byte types (the sum must wrap "
                               "in the element's bits)")
    if element_type not in DATA_TYPES:
        raise UnsupportedError(f"{where}: NCCL has no such data type (it reduces s8, u8, "
                               "s32, u32, s64, u64, f16, bf16, f32, f64, f8e4m3fn, f8e5m2 "
                               "and sums c64 / c128)")
    if reduction in ("and", "or"):
        raise UnsupportedError(f"{where}: NCCL has no bitwise reductions")
    dtype, per_element = DATA_TYPES[element_type]
    if per_element != 1 and reduction != "sum":
        raise UnsupportedError(f"{where}: NCCL only sums complex numbers (as pairs of "
                               "reals)")
    return dtype, REDUCTION_OPS[reduction], per_element


def movement_type() -> int:
    """What a collective that moves data without combining it sends: bytes
    (every element type, sub-byte ones included, moves as its storage)."""
    return UINT8


class NcclOp(NamedTuple):
    """One step of a collective on one rank. kind: all_reduce, all_gather,
    reduce_scatter, broadcast (NCCL collectives: send / recv pointers,
    count, datatype, op or root), send / recv (pointer in `send` or `recv`,
    `peer`), copy (a local device copy of `count` bytes from `send` to
    `recv`), copy2d (`height` rows of `count` bytes, rows `src_pitch` /
    `dst_pitch` bytes apart), zero (`count` bytes of `recv` set to 0)."""
    kind: str
    send: int = 0
    recv: int = 0
    count: int = 0
    datatype: int = UINT8
    op: int = SUM
    peer: int = 0       # send / recv: the other rank; broadcast: the root
    height: int = 1
    src_pitch: int = 0
    dst_pitch: int = 0


def gather_blocks(src: int, dst: int, rows: int, block: int, ranks: int) -> list[NcclOp]:
    """Copies that turn `ranks` consecutive blocks of rows x block bytes at
    `src` (what NCCL gathers) into the column blocks of the rows x
    (ranks * block) array at `dst` (a gather along a dimension that more
    major ones of size > 1 precede)."""
    return [NcclOp("copy2d", src + r * rows * block, dst + r * block, block, height=rows,
                   src_pitch=block, dst_pitch=ranks * block) for r in range(ranks)]


def split_blocks(src: int, dst: int, rows: int, block: int, ranks: int) -> list[NcclOp]:
    """The inverse of `gather_blocks`: the column blocks of the rows x
    (ranks * block) array at `src` as consecutive blocks at `dst` (what
    NCCL scatters)."""
    return [NcclOp("copy2d", src + r * block, dst + r * rows * block, block, height=rows,
                   src_pitch=ranks * block, dst_pitch=block) for r in range(ranks)]


NCCL_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv")


def check_one_rank_per_gpu(gpus: Sequence[int], where: str = "") -> None:
    """Refuses a clique with more than one rank on a GPU (rank i runs on
    gpus[i]): NCCL allows one rank per GPU in a communicator
    (ncclCommInitAll reports ncclInvalidUsage, "duplicate GPU"). This is
    where "N ranks on one GPU" ends: a 1-GPU machine runs one rank.
    `where` starts the message (what asked for the clique)."""
    seen: dict[int, list[int]] = {}
    for rank, gpu in enumerate(gpus):
        seen.setdefault(int(gpu), []).append(rank)
    for gpu, ranks in seen.items():
        if len(ranks) > 1:
            raise NcclError("ncclCommInitAll", INVALID_USAGE,
                            f"{where}{len(ranks)} ranks on one GPU (GPU {gpu} would hold ranks "
                            f"{', '.join(map(str, ranks))} of a {len(gpus)}-rank clique): "
                            "NCCL allows one rank per GPU in a communicator; run one "
                            "device per GPU")


# -- the library --------------------------------------------------------------------

_lock = threading.Lock()
_lib: Any = None


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


_comm_t = ctypes.c_void_p
_stream_t = ctypes.c_void_p
_result_t = ctypes.c_int
_size_t = ctypes.c_size_t
_int = ctypes.c_int

_PROTOTYPES = {
    "ncclGetVersion": (_result_t, [ctypes.POINTER(_int)]),
    "ncclGetErrorString": (ctypes.c_char_p, [_result_t]),
    "ncclGetLastError": (ctypes.c_char_p, [_comm_t]),
    "ncclGetUniqueId": (_result_t, [ctypes.POINTER(_UniqueId)]),
    "ncclCommInitRank": (_result_t, [ctypes.POINTER(_comm_t), _int, _UniqueId, _int]),
    "ncclCommInitAll": (_result_t, [ctypes.POINTER(_comm_t), _int, ctypes.POINTER(_int)]),
    "ncclCommDestroy": (_result_t, [_comm_t]),
    "ncclCommAbort": (_result_t, [_comm_t]),
    "ncclCommGetAsyncError": (_result_t, [_comm_t, ctypes.POINTER(_result_t)]),
    "ncclAllReduce": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, _size_t, _int, _int,
                                  _comm_t, _stream_t]),
    "ncclAllGather": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, _size_t, _int,
                                  _comm_t, _stream_t]),
    "ncclReduceScatter": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, _size_t, _int, _int,
                                      _comm_t, _stream_t]),
    "ncclBroadcast": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, _size_t, _int, _int,
                                  _comm_t, _stream_t]),
    "ncclSend": (_result_t, [ctypes.c_void_p, _size_t, _int, _int, _comm_t, _stream_t]),
    "ncclRecv": (_result_t, [ctypes.c_void_p, _size_t, _int, _int, _comm_t, _stream_t]),
    "ncclGroupStart": (_result_t, []),
    "ncclGroupEnd": (_result_t, []),
}


def _candidates() -> list[Path]:
    override = os.environ.get("XLA_GPU_NCCL_LIBRARY")
    if override:
        return [Path(override)]
    return candidate_libraries(("libnccl.so.2", "libnccl.so"), "nccl")


def nccl_library() -> ctypes.CDLL:
    """libnccl, loaded once with typed entry points; NcclUnavailableError
    when none loads."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        errors = []
        for candidate in _candidates():
            try:
                lib = ctypes.CDLL(str(candidate))
            except OSError as e:
                errors.append(f"{candidate}: {e}")
                continue
            missing = [name for name in _PROTOTYPES if not hasattr(lib, name)]
            if missing:
                errors.append(f"{candidate}: no {', '.join(missing)}")
                continue
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            _lib = lib
            return lib
        hint = "$XLA_GPU_NCCL_LIBRARY" if os.environ.get("XLA_GPU_NCCL_LIBRARY") else \
            "install the nccl extra (pip install nvidia-nccl-cu13) or set " \
            "$XLA_GPU_NCCL_LIBRARY"
        raise NcclUnavailableError(f"NCCL (libnccl.so.2) not found, which the cuda target's "
                                   f"collectives need ({hint}); tried "
                                   + "; ".join(errors[:4]))


def error_string(result: int) -> str:
    """NCCL's words for an ncclResult_t."""
    text = nccl_library().ncclGetErrorString(int(result))
    return text.decode(errors="replace") if text else RESULT_NAMES.get(int(result), "?")


def _check(call: str, result: int, comm: Any = None) -> None:
    if result == 0:
        return
    lib = nccl_library()
    message = error_string(result)
    last = lib.ncclGetLastError(comm)
    last = last.decode(errors="replace") if last else ""
    if last and last not in message:
        message = f"{message}; {last}"
    raise NcclError(call, result, message)


def nccl_version() -> tuple[int, int, int]:
    """(major, minor, patch) of the loaded library."""
    lib = nccl_library()
    code = _int()
    _check("ncclGetVersion", lib.ncclGetVersion(ctypes.byref(code)))
    v = code.value
    # NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
    if v >= 10000:
        return v // 10000, (v % 10000) // 100, v % 100
    return v // 1000, (v % 1000) // 100, v % 100


# -- cliques ------------------------------------------------------------------------

_cliques: dict[tuple[int, ...], list[int]] = {}
_cliques_lock = threading.Lock()


def communicator(gpus: Sequence[int], rank: int) -> int:
    """The ncclComm_t of rank `rank` of the clique whose rank i runs on
    GPU gpus[i]: the clique is made the first time (ncclCommInitAll, every
    rank in this process) and kept for the process."""
    key = tuple(int(g) for g in gpus)
    check_one_rank_per_gpu(key)
    with _cliques_lock:
        comms = _cliques.get(key)
        if comms is None:
            lib = nccl_library()
            from .cuda import _ensure_context
            _ensure_context()
            handles = (_comm_t * len(key))()
            devices = (_int * len(key))(*key)
            _check(f"ncclCommInitAll({len(key)} rank(s) on GPUs {list(key)})",
                   lib.ncclCommInitAll(handles, len(key), devices))
            comms = _cliques[key] = [int(h or 0) for h in handles]
    return comms[rank]


def run_ops(comm: int, stream: int, ops: Sequence[NcclOp], what: str) -> None:
    """Issues `ops` in order on `stream` for the rank of `comm`: local
    copies and zero fills through the driver, each run of consecutive NCCL
    calls in one group. `what` names the collective in errors."""
    pending: list[NcclOp] = []
    for op in ops:
        if op.kind in _LOCAL_KINDS:
            _nccl_group(comm, stream, pending, what)
            pending = []
            _local(op, stream)
        elif op.count:
            pending.append(op)
    _nccl_group(comm, stream, pending, what)


_LOCAL_KINDS = ("copy", "copy2d", "zero")


def _local(op: NcclOp, stream: int) -> None:
    if op.count == 0 or op.height == 0:
        return
    from .cuda import _check as _cu_check, _driver
    cu = _driver()
    if op.kind == "copy":
        _cu_check("cuMemcpyDtoDAsync", cu.cuMemcpyDtoDAsync(op.recv, op.send, op.count, stream))
    elif op.kind == "zero":
        _cu_check("cuMemsetD8Async", cu.cuMemsetD8Async(op.recv, 0, op.count, stream))
    else:
        copy = cu.CUDA_MEMCPY2D()
        copy.srcMemoryType = copy.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
        copy.srcDevice, copy.srcPitch = cu.CUdeviceptr(op.send), op.src_pitch
        copy.dstDevice, copy.dstPitch = cu.CUdeviceptr(op.recv), op.dst_pitch
        copy.WidthInBytes, copy.Height = op.count, op.height
        _cu_check("cuMemcpy2DAsync", cu.cuMemcpy2DAsync(copy, stream))


def _nccl_group(comm: int, stream: int, calls: Sequence[NcclOp], what: str) -> None:
    if not calls:
        return
    lib = nccl_library()
    handle = ctypes.c_void_p(comm)
    s = ctypes.c_void_p(stream or None)
    _check(f"ncclGroupStart ({what})", lib.ncclGroupStart())
    try:
        for op in calls:
            if op.kind == "all_reduce":
                r = lib.ncclAllReduce(op.send, op.recv, op.count, op.datatype, op.op, handle, s)
            elif op.kind == "all_gather":
                r = lib.ncclAllGather(op.send, op.recv, op.count, op.datatype, handle, s)
            elif op.kind == "reduce_scatter":
                r = lib.ncclReduceScatter(op.send, op.recv, op.count, op.datatype, op.op,
                                          handle, s)
            elif op.kind == "broadcast":
                r = lib.ncclBroadcast(op.send, op.recv, op.count, op.datatype, op.peer,
                                      handle, s)
            elif op.kind == "send":
                r = lib.ncclSend(op.send, op.count, op.datatype, op.peer, handle, s)
            elif op.kind == "recv":
                r = lib.ncclRecv(op.recv, op.count, op.datatype, op.peer, handle, s)
            else:
                raise ValueError(f"unknown NCCL step {op.kind!r}")
            _check(f"nccl{_CALL_NAMES[op.kind]} ({what})", r, handle)
    finally:
        # Always closed: an open group would swallow the next collective.
        ended = lib.ncclGroupEnd()
    _check(f"ncclGroupEnd ({what})", ended, handle)
    async_error = _result_t()
    _check("ncclCommGetAsyncError", lib.ncclCommGetAsyncError(handle,
                                                              ctypes.byref(async_error)))
    _check(f"a collective ({what})", async_error.value, handle)


_CALL_NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather",
               "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast", "send": "Send",
               "recv": "Recv"}

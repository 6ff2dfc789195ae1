"""The PJRT C API table, implemented in Python over xla_gpu (cpu target).

jaxlib calls the slots from any thread (compiles run on its own worker
threads with the GIL released); ctypes takes the GIL on entry. The handle
map is shared state: single insertions and removals are atomic under the
GIL (libXlaGpuPjrt.so's Buffer_Destroy removes buffers from C), compound
changes hold `_lock`; runs and compiles happen outside it, so several
threads can dispatch at once.

Every handle points at a block (A.HANDLE) the object fills when it is made:
libXlaGpuPjrt.so answers the getters jax calls on every execute (executable
counts, a buffer's device, memory, type and dimensions) from it without
entering Python, and finished work is handed out as one shared, always
ready event (`_READY_EVENT`) whose slots never enter Python either. On the
cpu target the library also runs Execute itself once an executable's first
run here has cleared it (`_use_library_execute`); the result buffers it
makes sit in the map as their arrays until a Python slot asks for one
(`_adopt` makes its Buffer then).

Every slot catches every Python exception and returns it as a PJRT_Error:
jax raises it as a Python exception, the process never crashes on our side.
Slots xla_gpu does not implement answer "unimplemented: PJRT_<name> ...".
Execution is synchronous: outputs exist when Execute returns, so every event
is born ready (the shared ready one, or one carrying an error).
"""
from __future__ import annotations

import ctypes as C
import hashlib
import json
import logging
import functools
import os
import re
import struct
import sys
import threading
import warnings
from typing import NamedTuple

import numpy as np

from .._ctypes_arrays import array_type
from . import _abi as A
from ._abi import rd, rd_i32, wr, wr_bool, wr_i32
from ..runtime.spec import aligned_empty

logger = logging.getLogger(__name__)

PLATFORM = "xla_gpu"
# The client's target, chosen when the client is made (resolve_target):
# "cpu" (host memory, the grid emulated) or "cuda" (device memory on GPU 0).
TARGET = "cpu"
MEMORY_KIND = "device"
# The memories of each device, as XLA:GPU's client has them: its own
# ("device") and the host's page-locked memory ("pinned_host"), where jax
# keeps offloaded arrays (`memory_kind=`). On the cpu target both are host
# memory; a value is just tagged with where the program said it lives.
HOST_MEMORY_KIND = "pinned_host"
MEMORY_KINDS = (MEMORY_KIND, HOST_MEMORY_KIND)
# XLA_GPU_PJRT_TARGET=cpu|cuda|auto (default auto: cuda where a GPU and a
# cubin compiler are usable, else cpu).
TARGET_ENV = "XLA_GPU_PJRT_TARGET"
TARGET_REASON = ""

_lock = threading.RLock()
_objects: dict[int, object] = {}   # handle address -> Python object
_keep: list = []                   # process-lifetime ctypes objects (table, vtables, strings)
# jaxlib destroys its arrays and executables during interpreter shutdown,
# after module globals are torn down: the table, the callback thunks and the
# handles must outlive that, so these two containers are never freed.
_incref = C.pythonapi.Py_IncRef
_incref.argtypes = [C.py_object]
_incref.restype = None
_incref(_objects)
_incref(_keep)


def _keep_alive(obj):
    _keep.append(obj)
    return obj


# What jaxlib holds for every handle: an A.HANDLE block (the vtable pointer,
# the kind, the facts libXlaGpuPjrt.so answers getters from).
_HandleBlock = A.u64 * (A.HANDLE.size // 8)
# Word index of each A.HANDLE field.
_W = {name: offset // 8 for name, offset in A.HANDLE.fields.items()}
_W_DEVICE, _W_MEMORY, _W_DIMS, _W_NUM_DIMS = _W["device"], _W["memory"], _W["dims"], _W["num_dims"]
_W_SIZE, _W_TYPE, _W_DELETED = _W["on_device_size"], _W["type"], _W["deleted"]
_W_ARRAY, _W_EXTERNAL_REFS = _W["array"], _W["external_refs"]
assert [_W["vtable"], _W["kind"], _W_DEVICE, _W_MEMORY, _W_DIMS, _W_NUM_DIMS, _W_SIZE,
        _W_TYPE, _W_DELETED, _W["on_cpu"]] == list(range(10)) and _W_ARRAY == 15
# Filling a block word by word through ctypes costs a microsecond per
# buffer; struct writes the leading words at once.
_pack_head = struct.Struct("=2Q").pack_into               # vtable, kind
_pack_buffer_head = struct.Struct("=7Qq8Q").pack_into    # vtable ... array


class _Handle:
    """A plugin object with a stable C address (what jaxlib holds). The
    first word is a vtable pointer for PJRT_Error and PJRT_Memory, the
    second the kind of handle (A.HANDLE_KIND)."""

    def __init__(self, vtable: int = 0, kind: int = 0):
        self._block = block = _HandleBlock()
        if vtable or kind:
            _pack_head(block, 0, vtable, kind)
        self.addr = C.addressof(block)
        _objects[self.addr] = self   # atomic under the GIL

    def release(self) -> None:
        _objects.pop(self.addr, None)


def _get(addr: int, kind: type, what: str):
    obj = _objects.get(addr)
    if kind is Buffer and (obj.__class__ is np.ndarray or (obj is None and addr in _objects)):
        obj = _adopt(addr)
    if not isinstance(obj, kind):
        raise _PjrtError(A.INVALID_ARGUMENT, f"{what}: not a live xla_gpu {kind.__name__} handle")
    return obj


class _PjrtError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------- errors
class Error(_Handle):
    def __init__(self, code: int, message: str):
        super().__init__(C.addressof(_ERROR_VTABLE))
        self.code = code
        self.message = A.CString(message)

    def copy(self) -> "Error":
        return Error(self.code, self.message.data.decode(errors="replace"))


def _err_destroy(e):
    obj = _objects.get(e)
    if isinstance(obj, Error):
        obj.release()


def _err_message(e, msg_out, size_out):
    obj = _objects[e]
    wr(msg_out, 0, obj.message.addr)
    wr(size_out, 0, obj.message.size)


def _err_code(e):
    return _objects[e].code


def _err_payloads(e, visitor, user_arg):
    return None


def _vtable(layout: A.Struct, **fields: int):
    """A process-lifetime vtable laid out as `layout`, fields set by name."""
    table = _keep_alive(array_type(A.u64, layout.size // 8)())
    for name, value in fields.items():
        wr(C.addressof(table), getattr(layout, name), value)
    return table


def _fn_addr(fn) -> int:
    return C.cast(_keep_alive(fn), C.c_void_p).value


_ERROR_VTABLE = _vtable(
    A.ERROR_VTABLE, struct_size=A.ERROR_VTABLE.size, instance_size=C.sizeof(_HandleBlock),
    extension_start=0,
    destroy=_fn_addr(A.ERR_DESTROY_FN(_err_destroy)),
    message=_fn_addr(A.ERR_MESSAGE_FN(_err_message)),
    get_code=_fn_addr(A.ERR_CODE_FN(_err_code)),
    for_each_payload=_fn_addr(A.ERR_PAYLOAD_FN(_err_payloads)))


def _error_code_of(exc: BaseException) -> int:
    from .. import errors as E
    if isinstance(exc, _PjrtError):
        return exc.code
    if isinstance(exc, E.UnsupportedError):
        return A.UNIMPLEMENTED
    if isinstance(exc, (E.HloError, E.ArgumentError, E.ArtifactError)):
        return A.INVALID_ARGUMENT
    if isinstance(exc, E.ResourceError):
        return A.RESOURCE_EXHAUSTED
    if isinstance(exc, E.DeadlineExceededError):
        return A.DEADLINE_EXCEEDED
    return A.INTERNAL


# ----------------------------------------------------------------------------- events
class Event(_Handle):
    """Born ready: the work it stands for finished before it was made."""

    def __init__(self, error: Error | None = None):
        super().__init__()
        self.error = error

    def error_copy(self) -> int:
        return self.error.copy().addr if self.error else 0


# The event of all finished work without an error, shared: jaxlib destroys
# each event it is given, and destroying this one does nothing, so one
# object serves every execute and transfer (no allocation per call).
_READY_EVENT = Event()


# ----------------------------------------------------------------------------- devices
_KIND_TEXTS = {kind: _keep_alive(A.CString(kind)) for kind in MEMORY_KINDS}
_MEMORY_KIND = _KIND_TEXTS[MEMORY_KIND]


class Memory(_Handle):
    """One memory of one device: `kind` one of MEMORY_KINDS. Ids: device
    d's own memory is d, its host memory num_devices + d (ids are unique
    across the client, as jaxlib keys memories by them)."""

    def __init__(self, index: int, kind: str = MEMORY_KIND):
        super().__init__(C.addressof(_MEMORY_VTABLE), A.HANDLE_KIND.MEMORY)
        self.kind = kind
        self.kind_text = _KIND_TEXTS[kind]
        self.kind_id = MEMORY_KINDS.index(kind)
        self._block[_W["memory_kind"]] = self.kind_text.addr
        self._block[_W["memory_kind_size"]] = self.kind_text.size
        self.index = index
        self.user_data: dict[int, tuple[int, int]] = {}
        self.text = A.CString(f"XlaGpuMemory(id={index}, kind={kind})")
        self.device: Device | None = None
        self.devices_array = None
        _add_live(self.addr)   # never removed: memories live as long as the process

    @property
    def on_host(self) -> bool:
        return self.kind != MEMORY_KIND


def _mem_get(m, key):
    with _lock:
        return _objects[m].user_data.get(key or 0, (0, 0))[0] or None


def _mem_set(m, key, data, dtor):
    with _lock:
        old = _objects[m].user_data.get(key or 0)
        _objects[m].user_data[key or 0] = (data or 0, dtor or 0)
    if old and old[1] and old[0] and old[0] != (data or 0):
        A.DELETER_FN(old[1])(old[0])


_MEMORY_VTABLE = _vtable(
    A.MEMORY_VTABLE, struct_size=A.MEMORY_VTABLE.size, extension_start=0,
    instance_struct_size=C.sizeof(_HandleBlock), get_user_data=_fn_addr(A.MEM_GET_FN(_mem_get)),
    set_user_data=_fn_addr(A.MEM_SET_FN(_mem_set)))


class Device(_Handle):
    def __init__(self, index: int, num_devices: int = 1):
        super().__init__()
        self.index = index
        self.description = DeviceDescription(
            index, TARGET, None if _CUDA is None else _CUDA.arch, _CUDA)
        # Its own memory (the default) first, then the host's.
        self.memories = [Memory(index), Memory(num_devices + index, HOST_MEMORY_KIND)]
        self.memory = self.memories[0]
        self.by_kind = {m.kind: m for m in self.memories}
        for m in self.memories:
            m.device = self
            m.devices_array = array_type(A.u64, 1)(self.addr)
        self.memories_array = array_type(A.u64, len(self.memories))(
            *[m.addr for m in self.memories])


class DeviceDescription(_Handle):
    """What jax reads of a device, a client's or a topology's: its id, kind,
    attributes and text. `arch` is the GPU architecture of a cuda device
    (None on the cpu target); `cuda` the client's GPU, where there is one."""

    def __init__(self, index: int, target: str, arch: str | None = None,
                 cuda: "_CudaMemory | None" = None):
        super().__init__()
        self.index = index
        self.attributes: A.NamedValues | None = None
        if cuda is not None:
            self.kind = A.CString(f"{cuda.name} (xla_gpu cuda target)")
            # As jax's cuda plugin reports them (device.compute_capability).
            self.attributes = A.NamedValues([("compute_capability", cuda.compute_capability),
                                             ("core_count", cuda.core_count)])
        elif arch is not None:
            self.kind = A.CString(f"xla_gpu cuda target ({arch})")
            digits = arch.removeprefix("sm_").rstrip("a")
            self.attributes = A.NamedValues([("compute_capability",
                                              f"{digits[:-1]}.{digits[-1]}")])
        else:
            self.kind = A.CString(f"xla_gpu ({target} target)")
        self.text = A.CString(f"XlaGpuDevice(id={index}, target={target})")


class Client(_Handle):
    def __init__(self, num_devices: int = 1):
        super().__init__()
        self.devices = [Device(i, num_devices) for i in range(num_devices)]
        self.devices_array = array_type(A.u64, num_devices)(*[d.addr for d in self.devices])
        # Every device's own memory, then every device's host memory (by id).
        memories = sorted((m for d in self.devices for m in d.memories), key=lambda m: m.index)
        self.memories = memories
        self.memories_array = array_type(A.u64, len(memories))(*[m.addr for m in memories])


_CLIENT: Client | None = None
# XLA_GPU_NUM_DEVICES=N gives the client N devices (one by default), as
# XLA:CPU's --xla_force_host_platform_device_count does: each runs
# single-device programs on the cpu target; programs over several devices
# (replicas, partitions) are not compiled yet.
NUM_DEVICES_ENV = "XLA_GPU_NUM_DEVICES"
MAX_DEVICES = 256


def num_devices_from_env() -> int:
    value = os.environ.get(NUM_DEVICES_ENV, "").strip()
    if not value:
        return 1
    try:
        count = int(value)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_DEVICES:
        logger.warning("xla_gpu: %s=%r is not a device count in 1..%d; using 1",
                       NUM_DEVICES_ENV, value, MAX_DEVICES)
        return 1
    return count


def _cuda_problem() -> str | None:
    """Why the cuda target cannot run here; None when it can (a GPU the
    driver opens, and a cubin compiler for the kernels)."""
    from ..runtime import cuda
    if not cuda.cuda_available():
        try:
            cuda._primary_context()
        except Exception as exc:  # noqa: BLE001 - its message is the reason
            return f"no usable GPU ({exc})"
        return "no usable GPU"
    try:
        from ..backends.cuda.codegen import cubin_compiler
        compiler = cubin_compiler()
    except Exception as exc:  # noqa: BLE001 - a bad XLA_GPU_CUBIN_COMPILER, say
        return f"the cuda backend's toolchain is unusable ({type(exc).__name__}: {exc})"
    if compiler is None:
        return "no cubin compiler (neither nvJitLink nor ptxas was found)"
    return None


def resolve_target() -> tuple[str, str]:
    """(target, why) from XLA_GPU_PJRT_TARGET: cpu, cuda or auto (the
    default: cuda where it can run, else cpu). A forced cuda that cannot
    run is an error naming why (the client is not made)."""
    raw = os.environ.get(TARGET_ENV, "")
    choice = raw.strip().lower() or "auto"
    if choice not in ("auto", "cpu", "cuda"):
        raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: {TARGET_ENV}={raw!r} is not one of "
                         "cpu, cuda, auto")
    if choice == "cpu":
        return "cpu", f"{TARGET_ENV}=cpu"
    problem = _cuda_problem()
    if choice == "cuda":
        if problem:
            raise _PjrtError(A.FAILED_PRECONDITION, f"xla_gpu: {TARGET_ENV}=cuda, but the "
                             f"cuda target cannot run here: {problem}")
        return "cuda", f"{TARGET_ENV}=cuda"
    if problem:
        return "cpu", f"auto: {problem}"
    return "cuda", "auto: a usable GPU and a cubin compiler"


class _CudaMemory:
    """The cuda target's memory: device arrays (xla_gpu.runtime.cuda's
    DeviceArray) on GPU 0, the runtime's device. Every transfer and run
    goes on one stream of the plugin and is synchronized before the slot
    returns, so outputs exist when Execute returns and every event is
    born ready, as on the cpu target."""

    def __init__(self):
        from ..runtime import cuda
        self._cuda = cuda
        self.DeviceArray = cuda.DeviceArray
        device = cuda.device_description()
        major, minor = divmod(device.compute_capability, 10)
        self.arch = f"sm_{major}{minor}"
        self.compute_capability = f"{major}.{minor}"
        self.core_count = device.core_count
        with cuda.current_context():
            cu = cuda._driver()
            name = cuda._check("cuDeviceGetName", cu.cuDeviceGetName(256, cuda._device))
            self.stream = int(cuda._check("cuStreamCreate", cu.cuStreamCreate(0)))
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        self.name = name.split("\0", 1)[0].strip() or f"CUDA device 0 ({self.arch})"
        self.compile_options = {"target": "cuda", "arch": self.arch}

    def sync(self) -> None:
        cuda = self._cuda
        with cuda.current_context():
            cuda._check("cuStreamSynchronize", cuda._driver().cuStreamSynchronize(self.stream))

    def upload(self, array: np.ndarray):
        out = self.DeviceArray.from_host(array, self.stream)
        self.sync()   # the host buffer is free again when the slot returns
        return out

    def download(self, payload) -> np.ndarray:
        if isinstance(payload, np.ndarray):   # a token's placeholder
            return payload
        return payload.to_host(self.stream)   # synchronizes

    def copy(self, payload):
        if isinstance(payload, np.ndarray):
            return payload.copy()
        out = self.DeviceArray(payload.shape, payload.dtype, payload.nbytes)
        out.copy_from_device(payload.ptr, self.stream)
        self.sync()
        return out

    def pointer(self, payload) -> int:
        return payload.ctypes.data if isinstance(payload, np.ndarray) else payload.ptr

    def run(self, exe, args) -> tuple:
        # run() synchronizes the stream before it returns.
        return exe.run(*args, stream=self.stream, device_outputs=True)


def _make_cuda_memory() -> _CudaMemory:
    from ..errors import XlaGpuError
    try:
        return _CudaMemory()
    except XlaGpuError as exc:
        raise _PjrtError(A.FAILED_PRECONDITION, f"xla_gpu: the cuda target could not open "
                         f"GPU 0: {exc}") from exc


# The cuda target's memory (None on the cpu target), set with the client.
_CUDA: _CudaMemory | None = None


def _compile_options() -> dict:
    """xla_gpu.compile's target (and arch) for this client."""
    return _CUDA.compile_options if _CUDA is not None else {"target": TARGET}


def _client() -> Client:
    global _CLIENT, TARGET, TARGET_REASON, _CUDA, _ON_CPU
    with _lock:
        if _CLIENT is None:
            target, reason = resolve_target()
            count = num_devices_from_env()
            memory = None
            if target == "cuda":
                memory = _make_cuda_memory()
                if count != 1:
                    # The runtime runs on GPU 0 (its primary context) only.
                    logger.warning("xla_gpu: the cuda target has one device (GPU 0); "
                                   "%s=%d is ignored", NUM_DEVICES_ENV, count)
                count = 1
            TARGET, TARGET_REASON, _CUDA = target, reason, memory
            _ON_CPU = 0 if memory is not None else 1
            logger.info("xla_gpu: PJRT target %s (%s)", target, reason)
            _CLIENT = Client(count)
        return _CLIENT


# ----------------------------------------------------------------------------- buffers
_KIND_BUFFER = A.HANDLE_KIND.BUFFER
# cpu target: buffers are host memory (np.asarray is zero-copy); cuda:
# device memory (0, set with the client).
_ON_CPU = 1
# Dimensions and minor-to-major arrays by shape, shared by every buffer of
# that shape (jaxlib only reads them); bounded, as shapes are unbounded.
_SHAPE_ARRAYS: dict[tuple, tuple] = {}
_SHAPE_ARRAYS_MAX = 4096


def _shape_arrays(shape: tuple) -> tuple:
    """(dims, minor_to_major) int64 arrays of `shape`, and the address of dims."""
    arrays = _SHAPE_ARRAYS.get(shape)
    if arrays is None:
        n = max(1, len(shape))
        dims = array_type(A.i64, n)(*shape)
        arrays = (dims, array_type(A.i64, n)(*reversed(range(len(shape)))), C.addressof(dims))
        if len(_SHAPE_ARRAYS) >= _SHAPE_ARRAYS_MAX:
            _SHAPE_ARRAYS.clear()
        _SHAPE_ARRAYS[shape] = arrays
    return arrays


class Buffer(_Handle):
    # A buffer's deletion, whether its array is still there and its external
    # reference count live in its block, which the library's Execute reads
    # and, when a run consumes a donated buffer, writes (without Python: it
    # marks the block deleted, clears its array word and drops `_array`).
    def __init__(self, array, device: Device, code: int | None = None,
                 memory: "Memory | None" = None):
        """`array`: a numpy array (cpu target, or host memory on cuda) or a
        device array (cuda: shape, dtype, nbytes, ptr). `code`: the array's
        PJRT type where the caller knows it. `memory`: one of the device's
        memories (its own by default)."""
        # Made on every execute: the block is filled in one write, not
        # through _Handle.__init__.
        if code is None:
            code = A.DTYPE_CODES.get(array.dtype)
            if code is None:
                raise _PjrtError(A.UNIMPLEMENTED,
                                 f"xla_gpu: no PJRT buffer type for dtype {array.dtype}")
        shape = array.shape
        self.dims, self.minor_to_major, dims_addr = _shape_arrays(shape)
        self.nbytes = nbytes = array.nbytes
        self._block = block = _HandleBlock()
        if memory is None:
            memory = device.memory
        _pack_buffer_head(block, 0, 0, _KIND_BUFFER, device.addr, memory.addr, dims_addr,
                          len(shape), nbytes, code, 0, _ON_CPU, 0, 0, 0, 0, 0, id(array))
        self._array = array
        self.device = device
        self.memory = memory
        self.dtype = array.dtype
        self.code = code
        self.shape = shape
        self.addr = addr = C.addressof(block)
        _objects[addr] = self   # atomic under the GIL

    @classmethod
    def adopt(cls, addr: int, array: np.ndarray | None) -> "Buffer":
        """The Buffer of a result block libXlaGpuPjrt.so's Execute made (its
        facts are in the block; the map's value is its array, or None once
        a donation the library ran consumed it). The library owns the block
        and frees it at Buffer_Destroy."""
        self = cls.__new__(cls)
        self._block = block = _HandleBlock.from_address(addr)
        shape = tuple(array_type(A.i64, block[_W_NUM_DIMS]).from_address(block[_W_DIMS]))
        self.dims, self.minor_to_major, _ = _shape_arrays(shape)
        self.nbytes = block[_W_SIZE]
        self._array = array if block[_W_ARRAY] else None
        self.device = _objects[block[_W_DEVICE]]
        self.memory = _objects[block[_W_MEMORY]]
        self.dtype = array.dtype if array is not None else np.dtype(A.BUFFER_TYPES[block[_W_TYPE]])
        self.code = block[_W_TYPE]
        self.shape = shape
        self.addr = addr
        return self

    @property
    def array(self) -> np.ndarray | None:
        array = self._array
        # A word of 0: a donation the library ran consumed it.
        return array if array is None or self._block[_W_ARRAY] else None

    @array.setter
    def array(self, value) -> None:
        # The block names the array too: the library's Execute reads it.
        self._array = value
        self._block[_W_ARRAY] = 0 if value is None else id(value)

    @property
    def deleted(self) -> bool:
        return self._block[_W_DELETED] != 0

    @property
    def external_refs(self) -> int:
        return self._block[_W_EXTERNAL_REFS]

    @external_refs.setter
    def external_refs(self, value: int) -> None:
        self._block[_W_EXTERNAL_REFS] = value

    def mark_deleted(self) -> None:
        """Deleted (Buffer_Delete, or consumed by a donation); the array goes
        where no numpy view still reads it (the caller decides)."""
        self._block[_W_DELETED] = 1

    def set_type(self, code: int, nbytes: int) -> None:
        """Another PJRT type and size than the array's (a token)."""
        self.code, self.nbytes = code, nbytes
        self._block[_W_TYPE], self._block[_W_SIZE] = code, nbytes

    def live_array(self, what: str) -> np.ndarray:
        if self.deleted or self.array is None:
            # XLA's words for it (jax users search for them).
            raise _PjrtError(A.FAILED_PRECONDITION,
                             f"xla_gpu: {what}: the buffer has been deleted or donated")
        return self.array


def _adopt(addr: int):
    """What the map holds at `addr` once a library-made result there (its
    value is the result array, or None where a donation consumed it) has
    its Buffer object."""
    with _lock:
        obj = _objects.get(addr)
        if obj.__class__ is np.ndarray or (obj is None and addr in _objects):
            obj = _objects[addr] = Buffer.adopt(addr, obj)
        return obj


def _token_buffer(device: Device) -> Buffer:
    """A token result: PJRT type TOKEN, no dimensions, no bytes (a program
    ignores what it is given for a token parameter)."""
    buf = Buffer(np.zeros((), np.uint8), device)
    buf.set_type(A.BUFFER_TYPE["TOKEN"], 0)
    return buf


class _HostMemory:
    """`size` bytes at `addr` as numpy sees them (read-only), without a
    ctypes array type: `c_char * size` makes a new type for each size,
    which lives in reference cycles (jax's tests count a jit call's
    garbage)."""
    __slots__ = ("__array_interface__",)

    def __init__(self, addr: int, size: int):
        self.__array_interface__ = {"data": (addr, True), "shape": (size,),
                                    "typestr": "|u1", "version": 3}


def _host_array(addr: int, dtype: np.dtype, dims: list[int], strides: list[int]) -> np.ndarray:
    """Copies a host buffer (any byte strides) into a fresh C-ordered array,
    aligned as the runtime's pooled buffers are (64 bytes), so that a
    donated buffer can be written in place from the first step on."""
    count = int(np.prod(dims)) if dims else 1
    if count == 0:
        return np.zeros(dims, dtype)
    if not strides:
        strides = list(np.zeros(dims, dtype).strides) if dims else []
    lo = sum((d - 1) * s for d, s in zip(dims, strides) if s < 0)
    hi = sum((d - 1) * s for d, s in zip(dims, strides) if s > 0) + dtype.itemsize
    raw = np.asarray(_HostMemory(addr + lo, hi - lo))
    view = np.ndarray(dims, dtype, buffer=raw, offset=-lo, strides=strides)
    out = aligned_empty(tuple(dims), dtype, _DONATED_ALIGNMENT)
    out[...] = view
    return out


# Where the runtime writes a donated argument in place (program.py's
# pooled-buffer alignment).
_DONATED_ALIGNMENT = 64


# ----------------------------------------------------------------------------- executables
class Executable(_Handle):
    """One compiled program; jaxlib sees it through two handles, the
    PJRT_LoadedExecutable (this object) and its PJRT_Executable view."""

    def __init__(self, exe, computation, mlir_code: bytes, hlo_text: str, device: Device,
                 devices: list[Device] | None = None, partitioned_program: bytes | None = None,
                 compile_options: dict | None = None, partitioned_format: str = "mlir"):
        super().__init__(0, A.HANDLE_KIND.EXECUTABLE)
        self.exe = exe
        # xla_gpu.compile's target options it was compiled with.
        self.compile_options = dict(compile_options or _compile_options())
        # False when compiled for a topology: then jaxlib holds only its
        # PJRT_Executable view, and destroying that frees it.
        self.on_client = True
        # The devices it runs on, device d of the program (replica d //
        # num_partitions, partition d % num_partitions) on devices[d] (its
        # device assignment), and that assignment as jaxlib reads it back
        # (a DeviceAssignmentProto). One device for a single-device program.
        self.devices = list(devices) if devices else [device]
        self.device = self.devices[0]
        self.num_replicas = getattr(exe, "num_replicas", 1)
        self.num_partitions = getattr(exe, "num_partitions", 1)
        n = len(self.devices)
        self.devices_array = array_type(A.u64, n)(*[d.addr for d in self.devices])
        self.assignment = A.CString(_device_assignment_proto(
            [d.index for d in self.devices], self.num_replicas, self.num_partitions))
        # PJRT_LogicalDeviceIds {replica, partition} of each device.
        self.logical_ids = array_type(C.c_int32, 2 * n)(
            *[v for k in range(n) for v in divmod(k, self.num_partitions)])
        # The per-device program (ours as StableHLO bytecode, "mlir"; XLA's
        # partitioner's as an HloModuleProtoWithConfig, "hlo_with_config"):
        # what jax reads the output shardings from.
        self.partitioned_program = partitioned_program
        self.partitioned_format = partitioned_format
        self.mlir_code = mlir_code
        self.hlo_text = hlo_text
        # Parameters jax donated (input_output_alias): consumed by a run.
        self.donated = _aliased_parameters(hlo_text)
        self.deleted = False
        self.view = _ExecutableView(self)
        shape = computation.program_shape()
        self.num_params = len(shape.parameter_shapes())
        if n > 1:
            # Each device's outputs: the partitioned program's (its shards).
            outputs = exe.outputs
            self.out_tokens = [r.is_token for r in outputs]
            self.out_dtypes = [None if r.is_token else np.dtype(r.dtype) for r in outputs]
            self.out_dims = [() if r.is_token else tuple(r.dims) for r in outputs]
            self.num_outputs = len(outputs)
        else:
            result = shape.result_shape()
            leaves = result.tuple_shapes() if result.is_tuple() else [result]
            # Token results have no dtype or dimensions (jaxlib's Shape has none).
            self.out_tokens = [s.is_token() for s in leaves]
            self.out_dtypes = [None if t else np.dtype(s.numpy_dtype())
                               for s, t in zip(leaves, self.out_tokens)]
            self.out_dims = [() if t else tuple(s.dimensions())
                             for s, t in zip(leaves, self.out_tokens)]
            self.num_outputs = len(leaves)
        n = max(1, self.num_outputs)
        self.out_types = array_type(C.c_int, n)(*[A.BUFFER_TYPE["TOKEN"] if d is None else
                                         A.DTYPE_CODES.get(d, 0) for d in self.out_dtypes])
        flat = [d for dims in self.out_dims for d in dims]
        self.out_flat_dims = array_type(A.i64, max(1, len(flat)))(*flat)
        self.out_dim_sizes = array_type(C.c_size_t, n)(*[len(d) for d in self.out_dims])
        # Where each parameter and output lives (jax's memory kinds); the
        # C tables jaxlib reads them from.
        kinds = _memory_kinds(mlir_code)
        if kinds is None or len(kinds[0]) != self.num_params or \
                len(kinds[1]) != self.num_outputs:
            kinds = ([MEMORY_KIND] * self.num_params, [MEMORY_KIND] * self.num_outputs)
        self.param_kinds, self.out_kinds = kinds
        self.host_outputs = frozenset(j for j, k in enumerate(self.out_kinds) if k != MEMORY_KIND)
        self.param_kind_table = _kind_table(self.param_kinds)
        self.out_kind_table = _kind_table(self.out_kinds)
        self.name = A.CString(computation.name())
        text = exe.as_text()
        target = json.dumps(self.compile_options, sort_keys=True)
        self.fingerprint = A.CString(hashlib.sha256(f"{target}\n{text}".encode()).hexdigest())
        self._optimized: tuple[bytes, A.CString] | None = None
        self._cost: A.NamedValues | None = None
        self.name_text = computation.name()
        # Per output, what Execute makes its buffer from: (is a token, the
        # dtype, the dimensions, the PJRT type).
        self.out_plan = [(t, d, dims, code) for t, d, dims, code in zip(
            self.out_tokens, self.out_dtypes, self.out_dims, self.out_types)]
        for handle in (self, self.view):   # what libXlaGpuPjrt.so answers from
            handle._block[_W["num_replicas"]] = self.num_replicas
            handle._block[_W["num_partitions"]] = self.num_partitions
            handle._block[_W["num_outputs"]] = self.num_outputs
        # libXlaGpuPjrt.so's Execute: decided after the first run here
        # (_use_library_execute), when the program's C run exists.
        self.library_checked = False
        self.host_run = None
        self.output_plan = None
        _add_live(self.addr)   # the blocks are filled: getters may read them
        _add_live(self.view.addr)

    def optimized_program(self) -> tuple[A.CString, bytes, A.CString]:
        """(its format, the program, the program as a C string): our
        optimized module as an HloModuleProtoWithConfig ("hlo_with_config"),
        which jaxlib reads its layouts and shardings from after every
        compile (four times) and prints for `compiled.as_text()`: a
        protobuf it parses directly, where StableHLO bytecode ("mlir") costs
        it an MLIR context, a legalization and a conversion each time. A
        program our partitioner made goes as StableHLO (its shardings in
        module attributes), one XLA's partitioner made as XLA's own module
        (its shardings in the proto), and one whose text XLA cannot parse
        as the program jax handed over."""
        with _lock:
            if self._optimized is None and self.partitioned_program is not None:
                code = self.partitioned_program
                fmt = _HLO_FORMAT if self.partitioned_format == "hlo_with_config" else _MLIR_FORMAT
                self._optimized = (fmt, code, A.CString(code))
            if self._optimized is None:
                try:
                    import jaxlib._hlo as hlo
                    proto = hlo.hlo_module_from_text(
                        self.exe.as_text()).as_serialized_hlo_module_proto()
                    code = _hlo_module_with_config(bytes(proto))
                    self._optimized = (_HLO_FORMAT, code, A.CString(code))
                except Exception as exc:  # noqa: BLE001 - a view, never fatal
                    logger.debug("xla_gpu: optimized HLO not readable by XLA: %s", exc)
                    code = self.mlir_code
                    self._optimized = (_MLIR_FORMAT, code, A.CString(code))
            return self._optimized

    def cost(self) -> A.NamedValues:
        with _lock:
            if self._cost is None:
                m = self.exe.memory_analysis()
                moved = m.argument_size_in_bytes + m.output_size_in_bytes
                self._cost = A.NamedValues([("bytes accessed", float(moved))])
            return self._cost


def _kind_table(kinds: list[str]) -> tuple:
    """(the kinds' C strings, their sizes) as PJRT's memory-kind getters
    hand them out."""
    n = max(1, len(kinds))
    texts = [_KIND_TEXTS[k] for k in kinds] or [_MEMORY_KIND]
    return (array_type(A.u64, n)(*[t.addr for t in texts]),
            array_type(C.c_size_t, n)(*[t.size for t in texts]))


class _ExecutableView(_Handle):
    def __init__(self, loaded: Executable):
        super().__init__(0, A.HANDLE_KIND.EXECUTABLE)
        self.loaded = loaded


def _executable(addr: int, what: str) -> Executable:
    obj = _objects.get(addr)
    if isinstance(obj, _ExecutableView):
        return obj.loaded
    if isinstance(obj, Executable):
        return obj
    raise _PjrtError(A.INVALID_ARGUMENT, f"{what}: not a live xla_gpu executable handle")


_ALIAS = re.compile(r"input_output_alias=\{(.*?)\}\s*(?:,\s*\w+=|$)", re.M)
_ALIAS_PARAM = re.compile(r":\s*\((\d+),")
_DONOR = re.compile(r"buffer_donor=\{(.*?)\}\s*(?:,\s*\w+=|$)", re.M)
_DONOR_PARAM = re.compile(r"\(\s*(\d+)\s*,")


def _aliased_parameters(hlo_text: str) -> frozenset[int]:
    """The parameters jax donates: aliased to an output
    (`input_output_alias`) or, in programs over several devices, given up
    for any output to reuse (`buffer_donor`)."""
    header = hlo_text.split("\n", 1)[0]
    m = _ALIAS.search(header)
    donated = {int(p) for p in _ALIAS_PARAM.findall(m.group(1))} if m else set()
    m = _DONOR.search(header)
    if m:
        donated.update(int(p) for p in _DONOR_PARAM.findall(m.group(1)))
    return frozenset(donated)


def _varint(value: int) -> bytes:
    """`value` as a protobuf varint."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _device_assignment_proto(device_ids: list[int], replicas: int = 1,
                             partitions: int = 1) -> bytes:
    """DeviceAssignmentProto{replica_count, computation_count: partitions,
    computation_devices: one per partition, {replica_device_ids: the
    device of each replica}}; device (replica r, partition p) is
    device_ids[r * partitions + p]."""
    out = _proto_field(1, replicas) + _proto_field(2, partitions)
    for p in range(partitions):
        ids = b"".join(_proto_field(1, device_ids[r * partitions + p])
                       for r in range(replicas))
        out += _proto_field(3, ids)
    return out


class _Place(NamedTuple):
    """Where a compile's program will run: the devices it may be assigned
    (a client's, or a topology's when compiling ahead of time),
    xla_gpu.compile's target options for them, and how an error names
    them."""
    devices: list
    compile_options: dict
    owner: str


def _client_place() -> _Place:
    client = _client()
    return _Place(client.devices, _compile_options(),
                  f"this client has {len(client.devices)} (set {NUM_DEVICES_ENV} for more)")


def _assigned_devices(build, count: int, place: _Place) -> list:
    """The devices of a compile for `count` devices (replicas x
    partitions), device (replica r, partition p) at r * partitions + p:
    its device assignment's, else the place's first `count`."""
    devices = place.devices
    if count > len(devices):
        raise _PjrtError(A.INVALID_ARGUMENT,
                         f"xla_gpu: the program runs on {count} devices; {place.owner}")
    assignment = getattr(build, "device_assignment", None)
    if assignment is None:
        return devices[:count]
    text = str(assignment)   # DeviceAssignment{..., Computation0{0 4} Computation1{1 5}}
    computations = re.findall(r"Computation(\d+)\{([\d ]*)\}", text)
    partitions = len(computations)
    table = {(r, int(p)): int(i) for p, ids in computations
             for r, i in enumerate(ids.split())}
    if partitions == 0 or len(table) != count:
        raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: cannot read the device assignment "
                         f"{text} for {count} devices")
    out = []
    for d in range(count):
        index = table.get(divmod(d, partitions))
        if index is None or index >= len(devices):
            raise _PjrtError(A.INVALID_ARGUMENT,
                             f"xla_gpu: the device assignment {text} names a device that "
                             f"is not there: {place.owner}")
        out.append(devices[index])
    return out


# jax.jit(..., compiler_options={...}) reaches the plugin as option
# overrides. XLA accepts its build options and its debug flags (xla_*) and
# refuses any other name; xla_gpu does the same (the xla_* flags tune XLA's
# own passes, which xla_gpu does not run: they are accepted and ignored,
# with their values checked where the type is known).
_BUILD_OPTION_TYPES = {"exec_time_optimization_effort": float, "memory_fitting_effort": float,
                       "optimization_level": int, "memory_fitting_level": int}


def _check_compile_options(overrides, build) -> None:
    debug = build.debug_options
    for key, value in overrides:
        if key in _BUILD_OPTION_TYPES:
            kind = _BUILD_OPTION_TYPES[key]
            try:
                kind(value)
            except (TypeError, ValueError):
                raise _PjrtError(A.INVALID_ARGUMENT, f"While setting option {key}, "
                                 f"'{value}' is not a valid {kind.__name__} value.") from None
            continue
        if not key.startswith("xla_"):
            raise _PjrtError(A.INVALID_ARGUMENT, f"No such compile option: '{key}'")
        is_bool = isinstance(getattr(debug, key, None), bool) or \
            _debug_option_type(key) == _PROTO_TYPE_BOOL
        if is_bool and isinstance(value, str) and \
                value.lower() not in ("true", "false", "1", "0"):
            raise _PjrtError(A.INVALID_ARGUMENT, f"While setting option {key}, "
                             f"'{value}' is not a valid bool value.")


# FieldDescriptorProto.Type of a bool field.
_PROTO_TYPE_BOOL = 8
_option_types: dict[str, int | None] = {}


def _debug_option_type(key: str) -> int | None:
    """The protobuf type of XLA's DebugOptions field `key`, read from the
    descriptor of xla.proto that jaxlib's library embeds (jaxlib's Python
    binding exposes only some fields); None when it cannot be found. The
    serialized FieldDescriptorProto is the name (field 1), then the number,
    label and type (fields 3, 4, 5, varints)."""
    if key in _option_types:
        return _option_types[key]
    found = None
    try:
        import mmap

        import jaxlib
        library = os.path.join(os.path.dirname(jaxlib.__file__), "libjax_common.so")
        name = key.encode()
        with open(library, "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            at = data.find(b"\n" + bytes([len(name)]) + name) if len(name) < 128 else -1
            if at >= 0:
                at += 2 + len(name)
                for _ in range(4):     # number, label, type: a few varint fields
                    tag = data[at]
                    if tag & 7 != 0:   # not a varint: not the fields we want
                        break
                    at, value = _read_varint(data, at + 1)
                    if tag >> 3 == 5:
                        found = value
                        break
    except (OSError, ValueError, IndexError, ImportError):
        found = None
    _option_types[key] = found
    return found


def _proto_fields(data: bytes) -> dict[int, bytes]:
    """The length-delimited top-level fields of serialized protobuf message
    `data` (the last of each number), by field number."""
    fields, at = {}, 0
    while at < len(data):
        at, tag = _read_varint(data, at)
        kind = tag & 7
        if kind == 0:
            at, _ = _read_varint(data, at)
        elif kind == 1:
            at += 8
        elif kind == 5:
            at += 4
        elif kind == 2:
            at, size = _read_varint(data, at)
            fields[tag >> 3] = data[at:at + size]
            at += size
        else:
            raise ValueError(f"protobuf wire type {kind} at byte {at}")
    return fields


def _proto_field(number: int, payload: bytes | int) -> bytes:
    """Field `number` of a protobuf message: a varint, or length-delimited
    bytes."""
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _hlo_module_with_config(module: bytes, replicas: int = 1, partitions: int = 1) -> bytes:
    """The HloModuleProtoWithConfig (hlo_module = 1, config = 2) of
    serialized HloModuleProto `module`: the config's entry computation
    layout (its field 1) is the module's host program shape (the module's
    field 4, the ENTRY's layouts), with the replica and partition counts
    (fields 4 and 5), as XLA checks them against the module."""
    shape = _proto_fields(module).get(4)
    if shape is None:
        raise ValueError("the HloModuleProto has no host program shape")
    config = (_proto_field(1, shape) + _proto_field(4, replicas) +
              _proto_field(5, partitions))
    return _proto_field(1, module) + _proto_field(2, config)


def _read_varint(data, at: int) -> tuple[int, int]:
    """(the offset after it, the value) of the varint at `at`."""
    value, shift = 0, 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return at, value
        shift += 7


def _compile(code: bytes, fmt: str, options: bytes, place: _Place | None = None) -> Executable:
    if fmt != "mlir":
        raise _PjrtError(A.INVALID_ARGUMENT,
                         f"xla_gpu: program format '{fmt}' is not supported (expected 'mlir')")
    from jax._src.lib import _jax, xla_client
    parsed = xla_client.CompileOptions.ParseFromString(options)
    _check_compile_options(parsed.env_option_overrides, parsed.executable_build_options)
    build = parsed.executable_build_options
    computation = _jax.mlir.mlir_module_to_xla_computation(code, use_tuple_args=False,
                                                             return_tuple=False)
    import xla_gpu
    place = place or _client_place()
    if build.num_replicas > 1 or build.num_partitions > 1:
        return _compile_partitioned(code, options, computation, build, place)
    # Every constant with its values (the default prints a large one as {...}).
    text = _hlo_text(computation, code)
    (device,) = _assigned_devices(build, 1, place)
    exe = xla_gpu.compile(text, **place.compile_options)
    return Executable(exe, computation, code, text, device, compile_options=place.compile_options)


def _hlo_text(computation, code: bytes | None) -> str:
    """The program's HLO text, every constant with its values (the default
    prints a large one as {...}), the ENTRY's layouts as jax asks for them.
    The header's layouts are the converter's guess (a transposed result's
    comes out transposed); jax states what it wants on the StableHLO
    function instead (`mhlo.layout_mode`: a layout, or "default" / none for
    row-major, "auto" for the compiler's choice: the converter's)."""
    text = computation.as_hlo_text(print_large_constants=True)
    header, newline, rest = text.partition("\n")
    m = _ENTRY_LAYOUT.search(header)
    if code is None or m is None:
        return text
    from ..hlo.parser import parse_program_shape
    try:
        params, result = parse_program_shape(m.group(1))
    except Exception:  # noqa: BLE001 - left as jax printed it
        return text
    results = result.tuple_shapes if result.is_tuple else (result,)
    if b"mhlo.layout_mode" in code:   # (reading the program costs ~40 ms on a large one)
        modes = _layout_modes(code)
        if modes is None:
            return text
        arg_modes, result_modes = modes
        if len(arg_modes) != len(params) or len(result_modes) != len(results):
            return text
    else:
        arg_modes, result_modes = [""] * len(params), [""] * len(results)
    params = [_in_layout_mode(p, mode) for p, mode in zip(params, arg_modes)]
    results = [_in_layout_mode(r, mode) for r, mode in zip(results, result_modes)]
    return _restate_entry(header, m, params, results, result.is_tuple,
                          _memory_kinds(code)) + newline + rest


def _restate_entry(header: str, m, params, results, is_tuple: bool, kinds) -> str:
    """`header` with its entry_computation_layout (`m`, _ENTRY_LAYOUT's match)
    stated as `params` -> `results`, those in host memory (`kinds`, as
    _memory_kinds gives them) in memory space 5."""
    if kinds is None or len(kinds[0]) != len(params) or len(kinds[1]) != len(results):
        kinds = ([MEMORY_KIND] * len(params), [MEMORY_KIND] * len(results))
    texts = [_shape_text(p, kind) for p, kind in zip(params, kinds[0])]
    outs = [_shape_text(r, kind) for r, kind in zip(results, kinds[1])]
    laid_out = "(" + ", ".join(outs) + ")" if is_tuple else outs[0]
    fixed = "{(" + ", ".join(texts) + ")->" + laid_out + "}"
    return header[:m.start(1)] + fixed + header[m.end(1):]


def _host_memory_kinds(code: bytes | None) -> tuple[list[str], list[str]] | None:
    """The program's memory kinds (as _memory_kinds) where some parameter or
    result lives in host memory; None where all live in the device's."""
    kinds = _memory_kinds(code)
    if kinds is None or all(k == MEMORY_KIND for k in kinds[0] + kinds[1]):
        return None
    return kinds


def _with_memory_kinds(text: str, kinds) -> str:
    """An HLO module's text (a partitioner's per-device program) with the
    parameters and results that live in host memory (`kinds`, as
    _host_memory_kinds gives them) in memory space 5 in its
    entry_computation_layout, as XLA states them."""
    if kinds is None:
        return text
    header, newline, rest = text.partition("\n")
    m = _ENTRY_LAYOUT.search(header)
    if m is None:
        return text
    from ..hlo.parser import parse_program_shape
    try:
        params, result = parse_program_shape(m.group(1))
    except Exception:  # noqa: BLE001 - left as the partitioner printed it
        return text
    results = result.tuple_shapes if result.is_tuple else (result,)
    return _restate_entry(header, m, params, results, result.is_tuple, kinds) + newline + rest


def _shape_text(shape, kind: str) -> str:
    """`shape` as the header states it: in host memory, its layout names
    memory space 5, as XLA prints a pinned_host parameter or result."""
    if kind == MEMORY_KIND or shape.is_tuple or shape.element_type == "token":
        return str(shape)
    from ..hlo.shape import HOST_MEMORY_SPACE
    return str(shape.in_memory_space(HOST_MEMORY_SPACE))


_ENTRY_LAYOUT = re.compile(r"entry_computation_layout=(\{\(.*?\)->.*?\})(?:, \w+=|$)")


def _layout_modes(code: bytes) -> tuple[list[str], list[str]] | None:
    """The `mhlo.layout_mode` of each argument and result of the program's
    main function ("" where none is given); None if it cannot be read."""
    return _main_attributes(code, "mhlo.layout_mode")


def _memory_kinds(code: bytes | None) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The memory kind of each argument and result of the program's main
    function (jax's `mhlo.memory_kind`; "device" where none is given), or
    None when the program names none (or cannot be read): all "device"."""
    if not code or b"mhlo.memory_kind" not in code:
        return None
    return _read_memory_kinds(code)


@functools.lru_cache(maxsize=4)
def _read_memory_kinds(code: bytes) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    # (a compile asks three times: the HLO header, the partitioned program,
    # the executable; reading the program costs ~40 ms on a large one)
    found = _main_attributes(code, "mhlo.memory_kind")
    if found is None:
        return None
    args, results = (tuple(kind or MEMORY_KIND for kind in kinds) for kinds in found)
    for kind in args + results:
        if kind not in MEMORY_KINDS:
            raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: memory kind '{kind}' is not one "
                             f"of this platform's ({', '.join(MEMORY_KINDS)})")
    return args, results


def _main_attributes(code: bytes, name: str) -> tuple[list[str], list[str]] | None:
    """The string attribute `name` of each argument and result of the
    program's main function ("" where none is given); None if it cannot be
    read."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib import _jax
    try:
        with mlir.make_ir_context():
            try:   # jax sends a portable artifact (VHLO)
                module = _jax.mlir.deserialize_portable_artifact(code)
            except Exception:  # noqa: BLE001 - plain StableHLO
                module = None
            if not isinstance(module, ir.Module):
                module = ir.Module.parse(code)
            for op in module.body.operations:
                if op.operation.name == "func.func" and \
                        ir.StringAttr(op.attributes["sym_name"]).value == "main":
                    return (_modes_of(op, "arg_attrs", name), _modes_of(op, "res_attrs", name))
    except Exception:  # noqa: BLE001 - the header is then taken as it is
        return None
    return None


def _modes_of(func, key: str, name: str) -> list[str]:
    from jax._src.lib.mlir import ir
    if key not in func.attributes:
        kind = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        return [""] * len(kind.inputs if key == "arg_attrs" else kind.results)
    out = []
    for attrs in ir.ArrayAttr(func.attributes[key]):
        attrs = ir.DictAttr(attrs)
        out.append(ir.StringAttr(attrs[name]).value if name in attrs else "")
    return out


def _in_layout_mode(shape, mode: str):
    """`shape` in the layout its mode asks for (tuples and tokens as they are)."""
    from ..hlo.shape import Shape, default_layout
    if shape.is_tuple or shape.element_type == "token" or mode == "auto" or not shape.rank:
        return shape   # auto: the layout the converter gives, as XLA's assignment would
    layout = None
    if mode.startswith("{") and mode.endswith("}") and ":" not in mode:
        try:
            layout = tuple(int(v) for v in mode[1:-1].split(",") if v.strip())
        except ValueError:
            layout = None
        if layout is not None and sorted(layout) != list(range(shape.rank)):
            layout = None
    return Shape(shape.element_type, shape.dims,
                 layout if layout is not None else default_layout(shape.rank))


# jax hands over the program with its sharding annotations (Shardy's), not
# partitioned: xla_gpu's SPMD partitioner (xla_gpu.hlo.passes.spmd) makes the
# per-device program, which xla_gpu then compiles and runs on every device
# (run_partitioned). Where ours refuses (replicas, partly manual shard_maps,
# shardings it would change), XLA's (jaxlib's cpu client, with as many
# devices) makes it instead; XLA_GPU_SPMD_PARTITIONER=xla always asks XLA's.
_PARTITIONERS: dict[int, object] = {}
# Which partitioner made each program compiled here: {"xla_gpu": n, "xla": m}.
partitioner_counts: dict[str, int] = {"xla_gpu": 0, "xla": 0}


def _partition_ourselves(computation, partitions: int,
                         code: bytes | None = None) -> tuple[str, bytes, str] | None:
    """The per-device HLO text, the program jax reads the shardings back
    from and its format ("mlir": StableHLO bytecode; "hlo_with_config"
    where parameters or results live in host memory, whose memory space
    StableHLO's entry layouts cannot state) made by xla_gpu's partitioner;
    None where it refuses the program or would cut a parameter otherwise
    than jax does."""
    from jax._src.lib import _jax
    import jaxlib._hlo as hlo
    from ..errors import XlaGpuError
    from ..hlo import parse_module
    from ..hlo.passes.spmd import HloSharding, partition_module, sharding_of
    from ..hlo.passes.spmd.placement import same_placement
    from ..hlo.printer import module_to_text
    try:
        module = parse_module(_hlo_text(computation, code))
        reason = _left_to_xla(module)
        if reason is not None:
            logger.debug("xla_gpu: XLA's SPMD partitioner partitions the program: %s", reason)
            return None
        stated = [sharding_of(p, partitions) for p in module.entry.parameters]
        with warnings.catch_warnings(record=True) as fallbacks:
            warnings.simplefilter("always")
            result = partition_module(module, partitions)
    except XlaGpuError as exc:
        logger.debug("xla_gpu: our SPMD partitioner refused the program: %s", exc)
        return None
    if result.body_constraints_dropped:
        # XLA partitions such a body along its automatic axes, and jax
        # reads the results' placement back from the program.
        logger.debug("xla_gpu: our SPMD partitioner leaves shard_map bodies whole where "
                     "their constraints cut them: %s", result.body_constraints_dropped)
        return None
    for i, (want, got, shape) in enumerate(zip(stated, result.parameter_shardings,
                                                result.parameter_shapes)):
        if want is None and not shape.is_tuple:
            # Left to the compiler (a token; an argument jax placed on no
            # mesh): jax reads the placement back from the program.
            continue
        if want is None or want.kind not in ("tiled", "replicated", "maximal") or \
                shape.is_tuple or not same_placement(
                    want if want.kind == "tiled" else got, got, shape.rank, partitions):
            logger.debug("xla_gpu: parameter %d's sharding %s is not kept by our SPMD "
                         "partitioner", i, want)
            return None
    root = result.module.entry.root
    outs = result.output_shardings
    if outs:
        root.attrs["sharding"] = str(outs[0] if not root.shape.is_tuple else
                                     HloSharding.tuple_of(outs))
        stated = root.attrs["sharding"]
    else:
        # XLA gives an empty tuple one (replicated) leaf sharding, and jaxlib
        # refuses an output sharding list of any other length for it (XLA's
        # importer, a sharding on a root without results).
        stated = str(HloSharding.tuple_of([HloSharding.replicated()]))
    host = _host_memory_kinds(code)
    text = _with_memory_kinds(module_to_text(result.module), host)
    params = [str(p) for p in result.parameter_shardings]
    fmt = "mlir" if host is None else "hlo_with_config"
    try:
        proto = bytes(hlo.hlo_module_from_text(_synchronous_view(result.module, text)
                                               ).as_serialized_hlo_module_proto())
        if fmt == "mlir":
            partitioned = _with_module_attributes(
                bytes(_jax.mlir.hlo_to_stablehlo(proto)), text, (stated, params))
        else:
            partitioned = _hlo_module_with_config(
                proto + _spmd_shardings_fields(stated, params), 1, partitions)
    except Exception as exc:  # noqa: BLE001 - XLA's parser's own message
        logger.debug("xla_gpu: our per-device program does not read back into XLA: %s", exc)
        return None
    for caught in fallbacks:   # the program is ours: its warnings stand
        warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
    for config, sharding in result.inspected:
        _report_sharding(config, str(sharding))
    return text, partitioned, fmt


def _spmd_shardings_fields(output: str, params: list[str]) -> bytes:
    """HloModuleProto's spmd_output_sharding (12) and
    spmd_parameters_shardings (14): where jaxlib reads a partitioned
    program's output and parameter shardings from (XLA's partitioner sets
    them in the module's config, which HLO text does not carry)."""
    from jax._src.lib import xla_client
    def op_sharding(text: str) -> bytes:
        return xla_client.HloSharding.from_string(text).to_proto().SerializeToString()
    return _proto_field(12, op_sharding(output)) + b"".join(
        _proto_field(14, op_sharding(p)) for p in params)


def _synchronous_view(module, text: str) -> str:
    """`text` (the per-device program) with its async collective pairs
    made synchronous: what jax reads shardings and `as_text()` from, as
    StableHLO, whose import into jaxlib refuses the pairs."""
    from ..hlo.collectives import ASYNC_COLLECTIVE_STARTS
    from ..hlo.passes.async_collectives_to_sync import AsyncCollectivesToSync
    from ..hlo.printer import module_to_text
    if not any(i.opcode in ASYNC_COLLECTIVE_STARTS
               for c in module.computations for i in c.instructions):
        return text
    from ..hlo.passes.control_dep_converter import ControlDepConverter
    view = module.clone()
    ControlDepConverter().run(view)   # (a start ordered by control_dep calls)
    AsyncCollectivesToSync().run(view)
    return module_to_text(view)


# Custom calls that send a program to XLA's partitioner, and why (with
# the sharding groups', see `_left_to_xla`):
_XLA_PARTITIONS = {
    # jax.experimental.custom_partitioning: the rule that cuts the call is
    # Python that jax registers with XLA's partitioner
    # (register_custom_call_partitioner), which calls it back.
    "CustomSPMDPartitioning": "jax's partitioning rule for custom call '{}' is a callback "
                              "registered with XLA",
}


def _left_to_xla(module) -> str | None:
    """Why XLA's partitioner, not ours, partitions `module` (a custom call
    of `_XLA_PARTITIONS`, or a sharding group's), else None."""
    from ..hlo.passes.spmd.propagation import SHARDING_GROUP_TARGET
    # jax's shard_alike: the values of a group get the sharding Shardy's
    # propagation settles on for all of them (an unplaced argument
    # included), which jax then reports; ours ties the group's values
    # together but does not reproduce Shardy's choices.
    reasons = {**_XLA_PARTITIONS,
               SHARDING_GROUP_TARGET: "'{}' ties values into a sharding group (shard_alike)"}
    for computation in module.computations:
        for inst in computation.instructions:
            if inst.opcode == "custom-call":
                why = reasons.get(inst.attrs.get("custom_call_target"))
                if why is not None:
                    return why.format(inst.name)
    return None


class _InspectArgs(C.Structure):
    # jaxlib's JAX_InspectSharding_Callback_Args: the serialized OpSharding
    # in, an error message out.
    _fields_ = [("sharding_spec", C.c_char_p), ("sharding_spec_size", C.c_size_t),
                ("error_txt", C.c_char_p), ("error_scratch", C.c_void_p),
                ("free_error", C.c_void_p)]


_INSPECT_CALL = C.CFUNCTYPE(None, C.c_void_p, C.POINTER(_InspectArgs))
_FREE_ERROR = C.CFUNCTYPE(None, C.POINTER(_InspectArgs))


def _report_sharding(config: str, sharding: str) -> None:
    """Calls jax's inspect_array_sharding callback as XLA's partitioner
    does: the custom call's backend_config holds jaxlib's
    JAX_InspectSharding_Callback ({call, data}, two pointers) and the
    callback takes the sharding as a serialized OpSharding."""
    from jax._src.lib import xla_client
    raw = config.encode("latin-1")
    if len(raw) != 2 * C.sizeof(C.c_void_p):
        raise _PjrtError(A.INVALID_ARGUMENT, "xla_gpu: InspectSharding's backend_config is "
                         f"{len(raw)} bytes, not jaxlib's callback")
    call, data = struct.unpack("PP", raw)
    proto = xla_client.HloSharding.from_string(sharding).to_proto().SerializeToString()
    args = _InspectArgs(proto, len(proto), None, None, None)
    _INSPECT_CALL(call)(data, C.byref(args))
    if args.error_txt:
        message = args.error_txt.decode("utf-8", "replace")
        if args.free_error:
            _FREE_ERROR(args.free_error)(C.byref(args))
        raise _PjrtError(A.INTERNAL, f"xla_gpu: inspect_array_sharding's callback failed: "
                         f"{message}")


def _layout_attribute(ir, shape):
    """A shape's layout as the module attribute jax reads (its minor-to-major
    order; a tuple's, element by element). At module level: a nested
    function that calls itself is a reference cycle, garbage after each
    compile."""
    if shape.is_tuple:
        return ir.ArrayAttr.get([_layout_attribute(ir, sub) for sub in shape.tuple_shapes])
    order = shape.minor_to_major if shape.element_type != "token" else ()
    return ir.DenseElementsAttr.get(np.array(order, dtype=np.int64), type=ir.IndexType.get())


def _with_module_attributes(code: bytes, hlo_text: str,
                            shardings: tuple[str, list[str]] | None = None) -> bytes:
    """The program's bytecode (HLO text `hlo_text` imported) with the module
    attributes jax reads its executables' layouts and shardings from: the
    ENTRY's layouts (the importer keeps only layouts other than row-major,
    and turning it back into HLO then lays a transposed result out
    transposed), and `shardings` (output, parameters), which XLA's
    partitioner sets in the module's config and HLO text does not carry."""
    import io
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from ..hlo.parser import parse_program_shape
    m = _ENTRY_LAYOUT.search(hlo_text.split("\n", 1)[0])
    params, result = parse_program_shape(m.group(1)) if m else (None, None)
    layout = functools.partial(_layout_attribute, ir)

    with mlir.make_ir_context():
        module = ir.Module.parse(code)
        attributes = module.operation.attributes
        if params is not None:
            attributes["mhlo.xla_entry_computation_parameter_layouts"] = ir.ArrayAttr.get(
                [layout(p) for p in params])
            attributes["mhlo.xla_entry_computation_result_layout"] = ir.ArrayAttr.get(
                [layout(result)])
        if shardings is not None:
            attributes["mhlo.spmd_output_sharding"] = ir.StringAttr.get(shardings[0])
            attributes["mhlo.spmd_parameters_shardings"] = ir.ArrayAttr.get(
                [ir.StringAttr.get(p) for p in shardings[1]])
        out = io.BytesIO()
        module.operation.write_bytecode(out)
        return out.getvalue()


def _xla_partitioner(count: int):
    """jaxlib's cpu client with `count` devices (one per device count,
    kept: making one starts threads)."""
    with _lock:
        client = _PARTITIONERS.get(count)
        if client is None:
            from jax._src.lib import xla_client
            client = _PARTITIONERS[count] = xla_client.make_cpu_client(num_devices=count)
        return client


def _compile_partitioned(code: bytes, options: bytes, computation, build,
                         place: _Place) -> Executable:
    import xla_gpu
    from jax._src.lib import _jax, xla_client
    replicas, partitions = build.num_replicas, build.num_partitions
    count = replicas * partitions
    devices = _assigned_devices(build, count, place)
    if replicas == 1 and os.environ.get("XLA_GPU_SPMD_PARTITIONER", "").lower() != "xla":
        ours = _partition_ourselves(computation, partitions, code)
        if ours is not None:
            text, partitioned, fmt = ours
            exe = xla_gpu.compile(text, num_partitions=partitions, **place.compile_options)
            partitioner_counts["xla_gpu"] += 1
            return Executable(exe, computation, code, text, devices[0], devices, partitioned,
                              compile_options=place.compile_options, partitioned_format=fmt)
    partitioner_counts["xla"] += 1
    partitioner = _xla_partitioner(len(place.devices))
    try:
        loaded = partitioner.compile_and_load(
            code, partitioner.devices()[:count], xla_client.CompileOptions.ParseFromString(options))
        module = loaded.hlo_modules()[0]
    except Exception as exc:  # noqa: BLE001 - the partitioner's own message
        raise _PjrtError(_error_code_of(exc), f"xla_gpu: partitioning the program for "
                         f"{replicas} replica(s) x {partitions} partition(s) (XLA's SPMD "
                         f"partitioner) failed: {exc}") from exc
    import jaxlib._hlo as hlo
    printing = hlo.HloPrintOptions.short_parsable()
    printing.print_large_constants = True
    text = _with_memory_kinds(module.to_string(printing), _host_memory_kinds(code))
    # XLA's own module, as XLA hands it to jax: its output and parameter
    # shardings are fields of the proto (which StableHLO would drop).
    partitioned = _hlo_module_with_config(bytes(module.as_serialized_hlo_module_proto()),
                                          replicas, partitions)
    exe = xla_gpu.compile(text, num_replicas=replicas, num_partitions=partitions,
                          **place.compile_options)
    return Executable(exe, computation, code, text, devices[0], devices, partitioned,
                      compile_options=place.compile_options, partitioned_format="hlo_with_config")


# jaxlib calls Compile on its own worker threads, whose stacks are too small
# for xla_gpu's compiler (MLIR/LLVM recurse deeply on some programs and
# overflow them: a segfault). So compiles run on a thread of ours with the
# main thread's usual stack.
_COMPILE_STACK = 64 << 20
_stack_lock = threading.Lock()


def _on_big_stack(fn, *args):
    result: list = []

    def work():
        try:
            result.append((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            result.append((False, exc))

    with _stack_lock:
        previous = threading.stack_size(_COMPILE_STACK)
        try:
            thread = threading.Thread(target=work, name="xla_gpu-pjrt-compile", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    ok, value = result[0]
    if ok:
        return value
    raise value


# Serialized executables (jax.experimental.serialize_executable, and what
# a compile for a topology hands over to be loaded elsewhere): a header (the
# target, the devices), the HLO text xla_gpu compiled, the program jax
# handed over, the per-device program jax reads shardings from, and the
# compiled program itself (its saved directory's files), which loading
# uses without compiling again; where a program cannot be saved, or
# XLA_GPU_PJRT_LOAD_CODE=0, loading compiles the text again.
_SERIAL_MAGIC = b"XLA_GPU_PJRT_EXE3\0"
_SECTIONS = ("text", "code", "partitioned", "program")


def _pack_files(files: dict[str, bytes]) -> bytes:
    index = json.dumps([[name, len(data)] for name, data in files.items()]).encode()
    return len(index).to_bytes(4, "little") + index + b"".join(files.values())


def _unpack_files(blob: bytes) -> dict[str, bytes]:
    size = int.from_bytes(blob[:4], "little")
    index = json.loads(blob[4:4 + size])
    files, at = {}, 4 + size
    for name, n in index:
        if not isinstance(name, str) or not isinstance(n, int) or n < 0 or at + n > len(blob):
            raise ValueError("a file of the compiled program is cut short")
        files[name] = blob[at:at + n]
        at += n
    return files


def _saved_program(e: Executable) -> bytes:
    """The compiled program's files, packed; empty where the program cannot
    be saved (a cpu kernel compiled without a linker has no shared object)."""
    from ..errors import XlaGpuError
    try:
        return _pack_files(e.exe.artifact_files())
    except XlaGpuError as exc:
        logger.debug("xla_gpu: the program is serialized as text only: %s", exc)
        return b""


def _serialize(e: Executable) -> bytes:
    program = _saved_program(e)
    sections = {"text": e.hlo_text.encode(), "code": e.mlir_code,
                "partitioned": e.partitioned_program or b"", "program": program}
    header = json.dumps({
        "target": e.compile_options, "devices": [d.index for d in e.devices],
        "num_replicas": e.num_replicas, "num_partitions": e.num_partitions,
        "partitioned": e.partitioned_program is not None,
        "partitioned_format": e.partitioned_format,
        "program_sha256": hashlib.sha256(program).hexdigest(),
        "sizes": [len(sections[k]) for k in _SECTIONS]}).encode()
    return (_SERIAL_MAGIC + len(header).to_bytes(4, "little") + header +
            b"".join(sections[k] for k in _SECTIONS))


def _target_words(options: dict) -> str:
    arch = options.get("arch")
    return f"the {options.get('target')} target" + (f" ({arch})" if arch else "")


def _read_serialized(blob: bytes) -> tuple[dict, dict[str, bytes]]:
    """(the header, the sections) of a serialized executable."""
    bad = _PjrtError(A.INVALID_ARGUMENT, "xla_gpu: not a serialized xla_gpu executable "
                     "(or one from another version of the plugin)")
    n = len(_SERIAL_MAGIC)
    if not blob.startswith(_SERIAL_MAGIC) or len(blob) < n + 4:
        raise bad
    size = int.from_bytes(blob[n:n + 4], "little")
    try:
        header = json.loads(blob[n + 4:n + 4 + size])
        sizes = [int(k) for k in header["sizes"]]
        devices = [int(d) for d in header["devices"]]
        target = dict(header["target"])
    except (ValueError, KeyError, TypeError):
        raise bad from None
    if len(sizes) != len(_SECTIONS) or min(sizes) < 0 or not devices or \
            n + 4 + size + sum(sizes) != len(blob):
        raise _PjrtError(A.INVALID_ARGUMENT, "xla_gpu: truncated serialized executable")
    sections, at = {}, n + 4 + size
    for name, k in zip(_SECTIONS, sizes):
        sections[name] = blob[at:at + k]
        at += k
    header["devices"], header["target"] = devices, target
    return header, sections


# XLA_GPU_PJRT_LOAD_CODE=0: a serialized executable's compiled program is
# never run; loading compiles the HLO it carries instead.
LOAD_CODE_ENV = "XLA_GPU_PJRT_LOAD_CODE"


def _load_saved_program(packed: bytes, sha256: str):
    """The compiled program of a serialized executable. Its digest only
    tells corruption apart (it travels with the bytes): running the code
    is trusted as jax's `deserialize_and_load` is by its own contract (it
    may run arbitrary code: never hand it untrusted bytes), and as XLA's
    executables, which are machine code, are (SECURITY.md). The runtime's
    loader still checks every file, manifest and slice."""
    import tempfile
    from ..runtime.artifact import write_artifact
    from ..runtime.program import load_program
    if hashlib.sha256(packed).hexdigest() != sha256:
        raise _PjrtError(A.ERROR_CODE.DATA_LOSS, "xla_gpu: the serialized executable's compiled "
                         "program does not match its digest (changed or cut short)")
    with tempfile.TemporaryDirectory(prefix="xla_gpu-deserialize-") as tmp:
        root = os.path.join(tmp, "program")
        write_artifact(root, _unpack_files(packed))
        return load_program(root, trusted=True)


def _deserialize(blob: bytes) -> Executable:
    header, sections = _read_serialized(blob)
    mine = _compile_options()
    if header["target"] != mine:
        raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: the serialized executable was "
                         f"compiled for {_target_words(header['target'])}; this client "
                         f"runs {_target_words(mine)}")
    client_devices = _client().devices
    for index in header["devices"]:
        if not 0 <= index < len(client_devices):
            raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: the serialized executable runs "
                             f"on device {index}; this client has {len(client_devices)}")
    counts = {k: int(header.get(k) or 1) for k in ("num_replicas", "num_partitions")}
    if len(set(header["devices"])) != len(header["devices"]) or \
            len(header["devices"]) != counts["num_replicas"] * counts["num_partitions"]:
        raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: the serialized executable's devices "
                         f"{header['devices']} are not one each for {counts['num_replicas']} "
                         f"replica(s) x {counts['num_partitions']} partition(s)")
    devices = [client_devices[i] for i in header["devices"]]
    text = sections["text"].decode()
    code = sections["code"]
    from jax._src.lib import _jax
    computation = _jax.mlir.mlir_module_to_xla_computation(code, use_tuple_args=False,
                                                             return_tuple=False)
    exe = None
    if sections["program"] and os.environ.get(LOAD_CODE_ENV, "1") != "0":
        from ..errors import ArtifactError
        try:
            exe = _load_saved_program(sections["program"], str(header.get("program_sha256")))
        except ArtifactError as exc:   # (a runtime that reads another format)
            logger.warning("xla_gpu: the serialized executable's compiled program does not "
                           "load (%s); compiling its HLO", exc)
    if exe is None:
        import xla_gpu
        exe = xla_gpu.compile(text, **counts, **mine)
    partitioned = sections["partitioned"] if header.get("partitioned") else None
    fmt = "hlo_with_config" if header.get("partitioned_format") == "hlo_with_config" else "mlir"
    return Executable(exe, computation, code, text, devices[0], devices, partitioned,
                      compile_options=mine, partitioned_format=fmt)


# ----------------------------------------------------------------------------- the slots
IMPL: dict = {}


def slot(fn):
    IMPL[fn.__name__] = fn
    return fn


@slot
def Error_Destroy(a):
    _err_destroy(rd(a, A.ERROR_DESTROY.error))


@slot
def Error_Message(a):
    f = A.ERROR_MESSAGE
    obj = _objects[rd(a, f.error)]
    wr(a, f.message, obj.message.addr)
    wr(a, f.message_size, obj.message.size)


@slot
def Error_GetCode(a):
    wr_i32(a, A.ERROR_GET_CODE.code, _objects[rd(a, A.ERROR_GET_CODE.error)].code)


@slot
def Error_ForEachPayload(a):
    return None


@slot
def Plugin_Initialize(a):
    return None


_ATTRIBUTES: A.NamedValues | None = None


def _stablehlo_versions() -> tuple[list[int], list[int]]:
    """The StableHLO versions of the jaxlib in this process (jax serializes
    the program for the plugin at the version the plugin reports)."""
    try:
        from jaxlib.mlir.dialects import stablehlo
        cur = [int(x) for x in stablehlo.get_current_version().split(".")]
        low = [int(x) for x in stablehlo.get_minimum_version().split(".")]
        return cur, low
    except Exception:  # noqa: BLE001 - jaxlib 0.10.2's values
        return [1, 17, 0], [0, 9, 0]


@slot
def Plugin_Attributes(a):
    global _ATTRIBUTES
    with _lock:
        if _ATTRIBUTES is None:
            cur, low = _stablehlo_versions()
            _ATTRIBUTES = A.NamedValues([("xla_version", 2), ("stablehlo_current_version", cur),
                                         ("stablehlo_minimum_version", low)])
    wr(a, A.PLUGIN_ATTRIBUTES.attributes, _ATTRIBUTES.addr)
    wr(a, A.PLUGIN_ATTRIBUTES.num_attributes, _ATTRIBUTES.count)


@slot
def Event_Destroy(a):
    ev = _objects.get(rd(a, A.EVENT_DESTROY.event))
    if isinstance(ev, Event) and ev is not _READY_EVENT:   # the shared one stays
        ev.release()


@slot
def Event_IsReady(a):
    _get(rd(a, A.EVENT_IS_READY.event), Event, "PJRT_Event_IsReady")
    wr_bool(a, A.EVENT_IS_READY.is_ready, True)


@slot
def Event_Error(a):
    return _get(rd(a, A.EVENT_ERROR.event), Event, "PJRT_Event_Error").error_copy()


@slot
def Event_Await(a):
    return _get(rd(a, A.EVENT_AWAIT.event), Event, "PJRT_Event_Await").error_copy()


@slot
def Event_OnReady(a):
    f = A.EVENT_ON_READY
    ev = _get(rd(a, f.event), Event, "PJRT_Event_OnReady")
    # The callback takes ownership of the error it is given.
    A.ON_READY_FN(rd(a, f.callback))(ev.error_copy() or None, rd(a, f.user_arg) or None)


@slot
def Client_Create(a):
    f = A.CLIENT_CREATE
    options = A.read_named_values(rd(a, f.create_options), rd(a, f.num_options))
    if options:
        logger.debug("xla_gpu PJRT client options ignored: %s", options)
    wr(a, f.client, _client().addr)


@slot
def Client_Destroy(a):
    return None   # the client and its devices live as long as the process


_PLATFORM_NAME = _keep_alive(A.CString(PLATFORM))


def platform_version_text(target: str, arch: str | None) -> str:
    """The platform version of a client or topology of `target` (`arch`
    the GPU's architecture on the cuda target). Part of jax's
    persistent-cache key (so the target and GPU arch are in it). Never
    contains "cuda": jax's test utilities read that word as "running on
    CUDA" (jax's own cuda plugin)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        v = version("xla_gpu")
    except PackageNotFoundError:
        v = "unknown"
    where = f"GPU target, {arch}" if target == "cuda" else f"{target} target"
    return f"xla_gpu {v} ({where})"


def _platform_version() -> A.CString:
    return A.CString(platform_version_text(TARGET, None if _CUDA is None else _CUDA.arch))


_PLATFORM_VERSION: A.CString | None = None   # made after the client (its target)


@slot
def Client_PlatformName(a):
    wr(a, A.CLIENT_PLATFORM_NAME.platform_name, _PLATFORM_NAME.addr)
    wr(a, A.CLIENT_PLATFORM_NAME.platform_name_size, _PLATFORM_NAME.size)


@slot
def Client_ProcessIndex(a):
    wr_i32(a, A.CLIENT_PROCESS_INDEX.process_index, 0)


@slot
def Client_PlatformVersion(a):
    global _PLATFORM_VERSION
    with _lock:
        if _PLATFORM_VERSION is None:
            _client()
            _PLATFORM_VERSION = _keep_alive(_platform_version())
    wr(a, A.CLIENT_PLATFORM_VERSION.platform_version, _PLATFORM_VERSION.addr)
    wr(a, A.CLIENT_PLATFORM_VERSION.platform_version_size, _PLATFORM_VERSION.size)


@slot
def Client_Devices(a):
    # Also Client_AddressableDevices (every device is addressable): the
    # same layout, checked by tests/python/pjrt/test_pjrt_abi.py.
    f = A.CLIENT_DEVICES
    c = _get(rd(a, f.client), Client, "PJRT_Client_Devices")
    wr(a, f.devices, C.addressof(c.devices_array))
    wr(a, f.num_devices, len(c.devices))


IMPL["Client_AddressableDevices"] = Client_Devices


def _lookup(a, what, client: int, id_: int, device: int):
    c = _get(rd(a, client), Client, what)
    i = rd_i32(a, id_)
    if not 0 <= i < len(c.devices):
        raise _PjrtError(A.INVALID_ARGUMENT,
                         f"xla_gpu: no device with id {i} (there are {len(c.devices)})")
    wr(a, device, c.devices[i].addr)


@slot
def Client_LookupDevice(a):
    f = A.CLIENT_LOOKUP_DEVICE
    _lookup(a, "PJRT_Client_LookupDevice", f.client, f.id, f.device)


@slot
def Client_LookupAddressableDevice(a):
    f = A.CLIENT_LOOKUP_ADDRESSABLE_DEVICE
    _lookup(a, "PJRT_Client_LookupAddressableDevice", f.client, f.local_hardware_id,
            f.addressable_device)


@slot
def Client_AddressableMemories(a):
    f = A.CLIENT_ADDRESSABLE_MEMORIES
    c = _get(rd(a, f.client), Client, "PJRT_Client_AddressableMemories")
    wr(a, f.addressable_memories, C.addressof(c.memories_array))
    wr(a, f.num_addressable_memories, len(c.memories))


@slot
def Client_DefaultDeviceAssignment(a):
    f = A.CLIENT_DEFAULT_DEVICE_ASSIGNMENT
    c = _get(rd(a, f.client), Client, "PJRT_Client_DefaultDeviceAssignment")
    replicas, partitions = rd_i32(a, f.num_replicas), rd_i32(a, f.num_partitions)
    size, out = rd(a, f.default_assignment_size), rd(a, f.default_assignment)
    if replicas * partitions > len(c.devices) or replicas * partitions > size:
        raise _PjrtError(A.INVALID_ARGUMENT,
                         f"xla_gpu: {replicas} replicas x {partitions} partitions need more "
                         f"than the {len(c.devices)} device(s) of this client")
    for i in range(replicas * partitions):
        C.c_int.from_address(out + C.sizeof(C.c_int) * i).value = i


def compile_for(code: bytes, fmt: str, options: bytes, place: _Place | None = None) -> Executable:
    """The Executable of the program jax hands over, for `place` (the
    client's devices by default), compiled on a thread of ours."""
    try:
        return _on_big_stack(_compile, code, fmt, options, place)
    except _PjrtError:
        raise
    except Exception as exc:  # noqa: BLE001 - becomes the jax exception's message
        raise _PjrtError(_error_code_of(exc), f"xla_gpu compile: {type(exc).__name__}: {exc}") from exc


@slot
def Client_Compile(a):
    f, p = A.CLIENT_COMPILE, A.PROGRAM
    program = rd(a, f.program)
    code = A.rd_bytes(rd(program, p.code), rd(program, p.code_size))
    fmt = A.rd_bytes(rd(program, p.format), rd(program, p.format_size)).decode(errors="replace")
    options = A.rd_bytes(rd(a, f.compile_options), rd(a, f.compile_options_size))
    wr(a, f.executable, compile_for(code, fmt, options).addr)


@slot
def Client_BufferFromHostBuffer(a):
    f = A.CLIENT_BUFFER_FROM_HOST_BUFFER
    c = _get(rd(a, f.client), Client, "PJRT_Client_BufferFromHostBuffer")
    code = rd_i32(a, f.type)
    dtype = A.BUFFER_TYPES.get(code)
    if dtype is None:
        raise _PjrtError(A.UNIMPLEMENTED, f"xla_gpu: PJRT buffer type {code} is not supported")
    dims = A.rd_i64s(rd(a, f.dims), rd(a, f.num_dims))
    strides = (A.rd_i64s(rd(a, f.byte_strides), rd(a, f.num_byte_strides))
               if rd(a, f.byte_strides) else [])
    if rd(a, f.device_layout):
        raise _PjrtError(A.UNIMPLEMENTED, "xla_gpu: device_layout in BufferFromHostBuffer")
    device_addr, memory_addr = rd(a, f.device), rd(a, f.memory)
    memory = None
    if memory_addr:   # jaxlib names the memory where it has one (a memory kind)
        memory = _get(memory_addr, Memory, "PJRT_Client_BufferFromHostBuffer memory")
        device = memory.device
        if device_addr and device_addr != device.addr:
            raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: memory {memory.index} "
                             f"({memory.kind}) is not a memory of the device asked for")
    elif device_addr:
        device = _get(device_addr, Device, "PJRT_Client_BufferFromHostBuffer device")
    else:
        device = c.devices[0]
    memory = memory or device.memory
    array = _host_array(rd(a, f.data), dtype, dims, strides)
    # The data is copied: the host buffer is free again as soon as we return.
    if _CUDA is not None and not memory.on_host:
        array = _CUDA.upload(array)
    buf = Buffer(array, device, code, memory)
    wr(a, f.done_with_host_buffer, _READY_EVENT.addr)
    wr(a, f.buffer, buf.addr)


@slot
def DeviceDescription_Id(a):
    f = A.DEVICE_DESCRIPTION_ID
    wr_i32(a, f.id, _get(rd(a, f.device_description), DeviceDescription,
                         "PJRT_DeviceDescription_Id").index)


@slot
def DeviceDescription_ProcessIndex(a):
    wr_i32(a, A.DEVICE_DESCRIPTION_PROCESS_INDEX.process_index, 0)


@slot
def DeviceDescription_Attributes(a):
    f = A.DEVICE_DESCRIPTION_ATTRIBUTES
    d = _get(rd(a, f.device_description), DeviceDescription, "PJRT_DeviceDescription_Attributes")
    wr(a, f.num_attributes, d.attributes.count if d.attributes else 0)
    wr(a, f.attributes, d.attributes.addr if d.attributes else 0)


@slot
def DeviceDescription_Kind(a):
    f = A.DEVICE_DESCRIPTION_KIND
    d = _get(rd(a, f.device_description), DeviceDescription, "PJRT_DeviceDescription_Kind")
    wr(a, f.device_kind, d.kind.addr)
    wr(a, f.device_kind_size, d.kind.size)


@slot
def DeviceDescription_DebugString(a):
    # Also DeviceDescription_ToString (same layout).
    f = A.DEVICE_DESCRIPTION_DEBUG_STRING
    d = _get(rd(a, f.device_description), DeviceDescription,
             "PJRT_DeviceDescription_DebugString")
    wr(a, f.debug_string, d.text.addr)
    wr(a, f.debug_string_size, d.text.size)


IMPL["DeviceDescription_ToString"] = DeviceDescription_DebugString


@slot
def Device_GetDescription(a):
    f = A.DEVICE_GET_DESCRIPTION
    wr(a, f.device_description,
       _get(rd(a, f.device), Device, "PJRT_Device_GetDescription").description.addr)


@slot
def Device_IsAddressable(a):
    wr_bool(a, A.DEVICE_IS_ADDRESSABLE.is_addressable, True)


@slot
def Device_LocalHardwareId(a):
    f = A.DEVICE_LOCAL_HARDWARE_ID
    wr_i32(a, f.local_hardware_id,
           _get(rd(a, f.device), Device, "PJRT_Device_LocalHardwareId").index)


@slot
def Device_AddressableMemories(a):
    f = A.DEVICE_ADDRESSABLE_MEMORIES
    d = _get(rd(a, f.device), Device, "PJRT_Device_AddressableMemories")
    wr(a, f.memories, C.addressof(d.memories_array))
    wr(a, f.num_memories, len(d.memories))


@slot
def Device_DefaultMemory(a):
    f = A.DEVICE_DEFAULT_MEMORY
    wr(a, f.memory, _get(rd(a, f.device), Device, "PJRT_Device_DefaultMemory").memory.addr)


_NO_ATTRIBUTES_DELETER = _keep_alive(A.DELETER_FN(lambda p: None))


@slot
def Device_GetAttributes(a):
    f = A.DEVICE_GET_ATTRIBUTES
    d = _get(rd(a, f.device), Device, "PJRT_Device_GetAttributes").description
    wr(a, f.attributes, d.attributes.addr if d.attributes else 0)
    wr(a, f.num_attributes, d.attributes.count if d.attributes else 0)
    wr(a, f.device_attributes, 0)
    wr(a, f.attributes_deleter, C.cast(_NO_ATTRIBUTES_DELETER, C.c_void_p).value)


@slot
def Memory_Id(a):
    wr_i32(a, A.MEMORY_ID.id, _get(rd(a, A.MEMORY_ID.memory), Memory, "PJRT_Memory_Id").index)


@slot
def Memory_Kind(a):
    m = _get(rd(a, A.MEMORY_KIND.memory), Memory, "PJRT_Memory_Kind")
    wr(a, A.MEMORY_KIND.kind, m.kind_text.addr)
    wr(a, A.MEMORY_KIND.kind_size, m.kind_text.size)


@slot
def Memory_Kind_Id(a):
    f = A.MEMORY_KIND_ID
    wr_i32(a, f.kind_id, _get(rd(a, f.memory), Memory, "PJRT_Memory_Kind_Id").kind_id)


@slot
def Memory_DebugString(a):
    # Also Memory_ToString (same layout).
    f = A.MEMORY_DEBUG_STRING
    m = _get(rd(a, f.memory), Memory, "PJRT_Memory_DebugString")
    wr(a, f.debug_string, m.text.addr)
    wr(a, f.debug_string_size, m.text.size)


IMPL["Memory_ToString"] = Memory_DebugString


@slot
def Memory_AddressableByDevices(a):
    f = A.MEMORY_ADDRESSABLE_BY_DEVICES
    m = _get(rd(a, f.memory), Memory, "PJRT_Memory_AddressableByDevices")
    wr(a, f.devices, C.addressof(m.devices_array))
    wr(a, f.num_devices, 1)


@slot
def Executable_Destroy(a):
    # A view goes with its loaded executable; one compiled for a topology
    # (never loaded) goes with its view.
    view = _objects.get(rd(a, A.EXECUTABLE_DESTROY.executable))
    if isinstance(view, _ExecutableView) and not view.loaded.on_client:
        _release_executable(view.loaded)


@slot
def Executable_Name(a):
    f = A.EXECUTABLE_NAME
    e = _executable(rd(a, f.executable), "PJRT_Executable_Name")
    wr(a, f.executable_name, e.name.addr)
    wr(a, f.executable_name_size, e.name.size)


@slot
def Executable_NumReplicas(a):
    f = A.EXECUTABLE_NUM_REPLICAS
    wr(a, f.num_replicas,
       _executable(rd(a, f.executable), "PJRT_Executable_NumReplicas").num_replicas)


@slot
def Executable_NumPartitions(a):
    f = A.EXECUTABLE_NUM_PARTITIONS
    wr(a, f.num_partitions,
       _executable(rd(a, f.executable), "PJRT_Executable_NumPartitions").num_partitions)


@slot
def Executable_NumOutputs(a):
    f = A.EXECUTABLE_NUM_OUTPUTS
    wr(a, f.num_outputs, _executable(rd(a, f.executable), "PJRT_Executable_NumOutputs").num_outputs)


@slot
def Executable_SizeOfGeneratedCodeInBytes(a):
    f = A.EXECUTABLE_SIZE_OF_GENERATED_CODE
    e = _executable(rd(a, f.executable), "PJRT_Executable_SizeOfGeneratedCodeInBytes")
    wr(a, f.size_in_bytes, e.exe.memory_analysis().generated_code_size_in_bytes)


@slot
def Executable_OutputElementTypes(a):
    f = A.EXECUTABLE_OUTPUT_ELEMENT_TYPES
    e = _executable(rd(a, f.executable), "PJRT_Executable_OutputElementTypes")
    wr(a, f.output_types, C.addressof(e.out_types))
    wr(a, f.num_output_types, e.num_outputs)


@slot
def Executable_OutputDimensions(a):
    f = A.EXECUTABLE_OUTPUT_DIMENSIONS
    e = _executable(rd(a, f.executable), "PJRT_Executable_OutputDimensions")
    wr(a, f.num_outputs, e.num_outputs)
    wr(a, f.dims, C.addressof(e.out_flat_dims))
    wr(a, f.dim_sizes, C.addressof(e.out_dim_sizes))


def _write_memory_kinds(a, table: tuple, count, f, num: int):
    wr(a, num, count)
    wr(a, f.memory_kinds, C.addressof(table[0]))
    wr(a, f.memory_kind_sizes, C.addressof(table[1]))


@slot
def Executable_OutputMemoryKinds(a):
    f = A.EXECUTABLE_OUTPUT_MEMORY_KINDS
    e = _executable(rd(a, f.executable), "PJRT_Executable_OutputMemoryKinds")
    _write_memory_kinds(a, e.out_kind_table, e.num_outputs, f, f.num_outputs)


@slot
def Executable_ParameterMemoryKinds(a):
    f = A.EXECUTABLE_PARAMETER_MEMORY_KINDS
    e = _executable(rd(a, f.executable), "PJRT_Executable_ParameterMemoryKinds")
    _write_memory_kinds(a, e.param_kind_table, e.num_params, f, f.num_parameters)


@slot
def Executable_Fingerprint(a):
    f = A.EXECUTABLE_FINGERPRINT
    e = _executable(rd(a, f.executable), "PJRT_Executable_Fingerprint")
    wr(a, f.executable_fingerprint, e.fingerprint.addr)
    wr(a, f.executable_fingerprint_size, e.fingerprint.size)


_MLIR_FORMAT = _keep_alive(A.CString("mlir"))
_HLO_FORMAT = _keep_alive(A.CString("hlo_with_config"))


@slot
def Executable_OptimizedProgram(a):
    # Two calls: code == NULL asks for the size, then jaxlib passes a buffer.
    f, p = A.EXECUTABLE_OPTIMIZED_PROGRAM, A.PROGRAM
    e = _executable(rd(a, f.executable), "PJRT_Executable_OptimizedProgram")
    program = rd(a, f.program)
    fmt, code, buf = e.optimized_program()
    wr(program, p.format, fmt.addr)
    wr(program, p.format_size, fmt.size)
    if rd(program, p.code):
        if rd(program, p.code_size) < len(code):
            raise _PjrtError(A.INVALID_ARGUMENT, "xla_gpu: OptimizedProgram buffer too small")
        C.memmove(rd(program, p.code), buf.addr, len(code))
    wr(program, p.code_size, len(code))


@slot
def Executable_GetCostAnalysis(a):
    f = A.EXECUTABLE_GET_COST_ANALYSIS
    cost = _executable(rd(a, f.executable), "PJRT_Executable_GetCostAnalysis").cost()
    wr(a, f.num_properties, cost.count)
    wr(a, f.properties, cost.addr)


@slot
def Executable_GetCompiledMemoryStats(a):
    f = A.EXECUTABLE_GET_COMPILED_MEMORY_STATS
    m = _executable(rd(a, f.executable), "PJRT_Executable_GetCompiledMemoryStats"
                    ).exe.memory_analysis()
    total = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
             - m.alias_size_in_bytes + m.generated_code_size_in_bytes)
    # Every field an int64; a caller of 0.94 knows only those up to
    # total_size_in_bytes (the 0.104 ones follow it): write what it knows.
    size = rd(a, f.struct_size)
    for off, v in ((f.generated_code_size_in_bytes, m.generated_code_size_in_bytes),
                   (f.argument_size_in_bytes, m.argument_size_in_bytes),
                   (f.output_size_in_bytes, m.output_size_in_bytes),
                   (f.alias_size_in_bytes, m.alias_size_in_bytes),
                   (f.temp_size_in_bytes, m.temp_size_in_bytes),
                   (f.host_generated_code_size_in_bytes, m.host_generated_code_size_in_bytes),
                   (f.host_argument_size_in_bytes, m.host_argument_size_in_bytes),
                   (f.host_output_size_in_bytes, m.host_output_size_in_bytes),
                   (f.host_alias_size_in_bytes, m.host_alias_size_in_bytes),
                   (f.host_temp_size_in_bytes, m.host_temp_size_in_bytes),
                   (f.peak_memory_in_bytes, m.peak_memory_in_bytes),
                   (f.total_size_in_bytes, total),
                   (f.total_allocation_bytes, m.peak_memory_in_bytes),
                   (f.indefinite_allocations, 0),
                   (f.peak_unpadded_heap_bytes, m.peak_memory_in_bytes)):
        if off + 8 <= size:
            wr(a, off, v)


# Bytes handed out with an owner and its deleter (a serialized executable,
# device assignment or topology) live as long as the object they describe:
# no owner, and a deleter that does nothing.
_NO_DELETER = _keep_alive(A.DELETER_FN(lambda p: None))


def write_owned_bytes(a, fields: tuple[int, int, int, int], data: A.CString) -> None:
    """Writes `data` into the (bytes, size, owner, deleter) out fields at
    `fields` of the argument struct at `a`."""
    at, size, owner, deleter = fields
    wr(a, at, data.addr)
    wr(a, size, data.size)
    wr(a, owner, 0)
    wr(a, deleter, C.cast(_NO_DELETER, C.c_void_p).value)


@slot
def Executable_Serialize(a):
    f = A.EXECUTABLE_SERIALIZE
    e = _executable(rd(a, f.executable), "PJRT_Executable_Serialize")
    if getattr(e, "serialized", None) is None:
        blob = _serialize(e)   # (once: the program's files are packed and hashed)
        with _lock:
            e.serialized = A.CString(blob)   # lives as long as the executable
    write_owned_bytes(a, (f.serialized_bytes, f.serialized_bytes_size, f.serialized_executable,
                          f.serialized_executable_deleter), e.serialized)


@slot
def Executable_DeserializeAndLoad(a):
    f = A.EXECUTABLE_DESERIALIZE_AND_LOAD
    _get(rd(a, f.client), Client, "PJRT_Executable_DeserializeAndLoad")
    blob = A.rd_bytes(rd(a, f.serialized_executable), rd(a, f.serialized_executable_size))
    try:
        e = _on_big_stack(_deserialize, blob)
    except _PjrtError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _PjrtError(_error_code_of(exc), f"xla_gpu load: {type(exc).__name__}: {exc}") from exc
    wr(a, f.loaded_executable, e.addr)


@slot
def LoadedExecutable_Destroy(a):
    e = _objects.get(rd(a, A.LOADED_EXECUTABLE_DESTROY.executable))
    if isinstance(e, Executable):
        _release_executable(e)


def _release_executable(e: Executable) -> None:
    _remove_live(e.view.addr)   # before the blocks can go
    _remove_live(e.addr)
    e.view.release()
    e.release()
    e.view.loaded = None   # (the two point at each other: no cycle left to collect)


@slot
def LoadedExecutable_GetExecutable(a):
    f = A.LOADED_EXECUTABLE_GET_EXECUTABLE
    wr(a, f.executable,
       _executable(rd(a, f.loaded_executable), "PJRT_LoadedExecutable_GetExecutable").view.addr)


@slot
def LoadedExecutable_AddressableDevices(a):
    f = A.LOADED_EXECUTABLE_ADDRESSABLE_DEVICES
    e = _executable(rd(a, f.executable), "PJRT_LoadedExecutable_AddressableDevices")
    wr(a, f.addressable_devices, C.addressof(e.devices_array))
    wr(a, f.num_addressable_devices, len(e.devices))


@slot
def LoadedExecutable_AddressableDeviceLogicalIds(a):
    f = A.LOADED_EXECUTABLE_ADDRESSABLE_DEVICE_LOGICAL_IDS
    e = _executable(rd(a, f.executable), "PJRT_LoadedExecutable_AddressableDeviceLogicalIds")
    wr(a, f.addressable_device_logical_ids, C.addressof(e.logical_ids))
    wr(a, f.num_addressable_device_logical_ids, len(e.devices))


@slot
def LoadedExecutable_GetDeviceAssignment(a):
    f = A.LOADED_EXECUTABLE_GET_DEVICE_ASSIGNMENT
    e = _executable(rd(a, f.executable), "PJRT_LoadedExecutable_GetDeviceAssignment")
    write_owned_bytes(a, (f.serialized_bytes, f.serialized_bytes_size,
                          f.serialized_device_assignment,
                          f.serialized_device_assignment_deleter), e.assignment)


@slot
def LoadedExecutable_Delete(a):
    e = _executable(rd(a, A.LOADED_EXECUTABLE_DELETE.executable), "PJRT_LoadedExecutable_Delete")
    with _lock:
        e.deleted = True
        e._block[_W["host_run"]] = 0   # Execute goes to Python, which refuses it


@slot
def LoadedExecutable_IsDeleted(a):
    f = A.LOADED_EXECUTABLE_IS_DELETED
    wr_bool(a, f.is_deleted,
            _executable(rd(a, f.executable), "PJRT_LoadedExecutable_IsDeleted").deleted)


# The words of PJRT_LoadedExecutable_Execute_Args, read in one go.
_ExecuteArgs = A.u64 * (A.EXECUTE.size // 8)
_X = {name: offset // 8 for name, offset in A.EXECUTE.fields.items()}
_X_EXECUTABLE, _X_OPTIONS, _X_ARGUMENT_LISTS = _X["executable"], _X["options"], _X["argument_lists"]
_X_NUM_DEVICES, _X_NUM_ARGS, _X_OUTPUT_LISTS = _X["num_devices"], _X["num_args"], _X["output_lists"]
_X_EVENTS, _X_EXECUTE_DEVICE = _X["device_complete_events"], _X["execute_device"]
_u64_at = A.u64.from_address


@slot
def LoadedExecutable_Execute(a):
    # The path of every jitted call: what does not change between calls
    # (names, output dtypes and dimensions, their shape arrays) was worked
    # out when the executable was made.
    w = _ExecuteArgs.from_address(a)
    e = _executable(w[_X_EXECUTABLE], "PJRT_LoadedExecutable_Execute")
    if e.deleted:
        raise _PjrtError(A.FAILED_PRECONDITION, f"xla_gpu: executable '{e.name_text}' "
                         "was deleted")
    num_devices, num_args = w[_X_NUM_DEVICES], w[_X_NUM_ARGS]
    if len(e.devices) > 1 or num_devices != 1:
        _execute_partitioned(a, e, num_devices, num_args)
        return
    device = e.device
    if w[_X_EXECUTE_DEVICE]:   # a portable executable, run where asked
        device = _get(w[_X_EXECUTE_DEVICE], Device, "PJRT_LoadedExecutable_Execute device")
    name = e.name_text
    arg_bufs = _argument_buffers(w[_X_ARGUMENT_LISTS], 0, num_args, device, name, "")
    args = []
    for i, buf in enumerate(arg_bufs):
        array = buf.array
        if array is None or buf.deleted:
            buf.live_array(f"argument {i} of '{name}'")   # raises
        args.append(array)
    given = ()
    if e.donated:
        _refuse_double_donation(e, arg_bufs, name)
        if _CUDA is None and IN_PLACE_DONATION:
            given = _given_up(e, arg_bufs, num_args, w[_X_OPTIONS])
    try:
        if given:   # written in place where the program writes them
            outs = e.exe.run(*args, donated=given)
        else:
            outs = e.exe.run(*args) if _CUDA is None else _CUDA.run(e.exe, args)
    except Exception as exc:  # noqa: BLE001 - becomes the jax exception's message
        raise _PjrtError(_error_code_of(exc), f"xla_gpu run: {type(exc).__name__}: {exc}") from exc
    if len(outs) != e.num_outputs:
        raise _PjrtError(A.INTERNAL, f"xla_gpu run: {len(outs)} outputs, expected {e.num_outputs}")
    if e.donated:
        _consume_donated(e, arg_bufs, num_args, w[_X_OPTIONS], given)
    _write_outputs(e, outs, _u64_at(w[_X_OUTPUT_LISTS]).value, device)   # device 0's list
    if w[_X_EVENTS]:
        _u64_at(w[_X_EVENTS]).value = _READY_EVENT.addr   # device 0's event
    if not e.library_checked:
        _use_library_execute(e)


# Whether libXlaGpuPjrt.so runs Execute itself, and also for executables
# with donated parameters (set by xla_gpu.pjrt when it switches these on).
LIBRARY_EXECUTE = False
LIBRARY_DONATION = False
# ...and hands the run the donated arguments nothing else reads, which it
# writes in place (XlaGpuPjrtEnableInPlaceDonation).
LIBRARY_IN_PLACE_DONATION = False
# Whether the Python slot lets the run write donated arguments in place
# (xla_gpu.pjrt.set_in_place_donation), and the library's switch for it.
IN_PLACE_DONATION = True
IN_PLACE_SWITCH = None


def _use_library_execute(e: Executable) -> None:
    """Lets libXlaGpuPjrt.so run `e` from now on where it can do exactly
    what this slot does: the cpu target, one device, no token parameters
    or results, a C run path (xla_gpu.runtime's HostRun, made by the first
    run) whose results are already the arrays this slot would hand jax (the
    outputs' dtypes and dimensions, C-contiguous), and no XLA_GPU_PROFILE
    (a run inside an xla_gpu trace is left to Python by the library).
    Donated parameters need a library that consumes them as
    `_consume_donated` does (LIBRARY_DONATION): the block lists them."""
    with _lock:
        if e.library_checked:
            return
        e.library_checked = True
        exe = e.exe
        run = getattr(exe, "_host_run", None)
        if (not LIBRARY_EXECUTE or _CUDA is not None or TARGET != "cpu" or e.deleted
                or len(e.devices) != 1 or (e.donated and not LIBRARY_DONATION)
                or any(e.out_tokens) or e.host_outputs or not run
                or getattr(exe, "_has_tokens", True) or getattr(exe, "num_devices", 1) != 1
                or not hasattr(run, "outputs")):
            return
        from .._trace import _PROFILE_PATH
        if _PROFILE_PATH is not None:
            return
        outputs = run.outputs()
        if len(outputs) != e.num_outputs:
            return
        plan = array_type(A.u64, A.OUTPUT.size // 8 * max(1, e.num_outputs))()
        at = C.addressof(e.out_flat_dims)
        words = A.OUTPUT.size // 8
        for j, (made, dtype, dims, code) in enumerate(zip(outputs, e.out_dtypes, e.out_dims,
                                                          e.out_types)):
            if made is None or not made[2] or made[0] != dtype or tuple(made[1]) != dims:
                return
            count = 1
            for d in dims:
                count *= d
            plan[j * words:(j + 1) * words] = [code, len(dims), count * dtype.itemsize, at]
            at += C.sizeof(A.i64) * len(dims)
        donated = sorted(e.donated)
        e.donated_array = array_type(A.i64, max(1, len(donated)))(*donated)
        e.host_run, e.output_plan = run, plan
        block = e._block
        block[_W_DEVICE], block[_W_MEMORY] = e.device.addr, e.device.memory.addr
        block[_W["outputs"]] = C.addressof(plan)
        block[_W["donated"]] = C.addressof(e.donated_array)
        block[_W["num_donated"]] = len(donated)
        block[_W["host_run"]] = id(run)


def _not_donatable(options: int) -> set[int]:
    """The parameters jaxlib lists as not donatable in this call."""
    o = A.EXECUTE_OPTIONS
    return (set(A.rd_i64s(rd(options, o.non_donatable_input_indices),
                          rd(options, o.num_non_donatable_input_indices)))
            if options else set())


def _given_up(e: Executable, arg_bufs: list, num_args: int, options: int) -> tuple[int, ...]:
    """The donated arguments of this call that nothing else reads (not
    listed as not donatable, no numpy view; passed twice was refused): the
    run may write them in place (`ProgramExecutable.run(donated=...)`)."""
    keep = _not_donatable(options)
    return tuple(p for p in sorted(e.donated - keep)
                 if p < num_args and arg_bufs[p].external_refs == 0)


def _consume_donated(e: Executable, arg_bufs: list, num_args: int, options: int,
                     given: tuple[int, ...] = ()) -> None:
    """Marks the donated arguments deleted after a run, except those jaxlib
    lists as not donatable this time. `given`: those the run was allowed to
    write in place, deleted whatever happened since."""
    keep = _not_donatable(options)
    with _lock:
        for p in e.donated - keep:
            buf = arg_bufs[p] if p < num_args else None
            if buf is None:
                continue
            if p in given:
                # Its memory may be the output now: gone even where a view
                # was taken during the run (which keeps the array until
                # Buffer_DecreaseExternalReferenceCount drops it).
                buf.mark_deleted()
            # A donated input is consumed as on XLA (unless a numpy view
            # still reads it: then it stays).
            if buf.external_refs == 0:
                buf.mark_deleted()
                buf.array = None


def _write_outputs(e: Executable, outs, out_list: int, device: Device) -> None:
    """One Buffer per output of a run, written to jaxlib's output list."""
    if not outs:
        return
    slots = array_type(A.u64, len(outs)).from_address(out_list)
    host = e.host_outputs
    for j, (out, (token, dtype, dims, code)) in enumerate(zip(outs, e.out_plan)):
        if token:
            slots[j] = _token_buffer(device).addr
            continue
        memory = device.by_kind[HOST_MEMORY_KIND] if host and j in host else None
        if _CUDA is not None:   # a device array of the output's shape
            if tuple(out.shape) != dims:
                raise _PjrtError(A.INTERNAL, f"xla_gpu run: output {j} has shape "
                                 f"{list(out.shape)}, expected {list(dims)}")
            if memory is not None and not isinstance(out, np.ndarray):
                out = _host_copy(out, code)   # jax placed it in host memory
            slots[j] = Buffer(out, device, code, memory).addr
            continue
        array = np.ascontiguousarray(out)
        if array.dtype is not dtype and array.dtype != dtype:
            array = array.astype(dtype)
        if array.shape != dims:
            array = array.reshape(dims)
        slots[j] = Buffer(array, device, code, memory).addr


def _argument_buffers(arg_lists: int, list_index: int, num_args: int, device, name: str,
                      where: str) -> list:
    """The Buffers of Execute's argument list `list_index` (`arg_lists`: the
    argument_lists pointer), each checked to live on `device` (the
    executable's device for that list)."""
    if not num_args:
        return []
    arg_list = _u64_at(arg_lists + A.POINTER * list_index).value
    bufs = []
    get = _objects.get
    for i, addr in enumerate(array_type(A.u64, num_args).from_address(arg_list)):
        buf = get(addr)
        if buf.__class__ is not Buffer:
            buf = _get(addr, Buffer, f"PJRT_LoadedExecutable_Execute argument {i}{where}")
        if buf.device is not device:
            raise _PjrtError(A.INVALID_ARGUMENT,
                             f"xla_gpu: argument {i}{where} of '{name}' is on device "
                             f"{buf.device.index}, the executable runs it on {device.index}")
        bufs.append(buf)
    return bufs


def _execute_partitioned(a, e: Executable, num_devices: int, num_args: int) -> None:
    """Execute of a program of several devices: argument_lists[d] and
    output_lists[d] are device d's (its shards), one run on them all
    (run_partitioned)."""
    f = A.EXECUTE
    name = e.name_text
    if num_devices != len(e.devices):
        raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: '{name}' runs on {len(e.devices)} "
                         f"devices, Execute passed {num_devices} argument lists")
    per_device, device_bufs = [], []
    for d, device in enumerate(e.devices):
        bufs = _argument_buffers(rd(a, f.argument_lists), d, num_args, device, name,
                                 f" of device {d}")
        if e.donated:
            _refuse_double_donation(e, bufs, name)
        per_device.append([buf.live_array(f"argument {i} of '{name}'")
                           for i, buf in enumerate(bufs)])
        device_bufs.append(bufs)
    try:
        outs = e.exe.run_partitioned(per_device)
    except Exception as exc:  # noqa: BLE001 - becomes the jax exception's message
        raise _PjrtError(_error_code_of(exc), f"xla_gpu run: {type(exc).__name__}: {exc}") from exc
    if e.donated:
        # Every device's shards of a donated argument are consumed, as on
        # XLA; the outputs are fresh arrays (nothing is written in place).
        for bufs in device_bufs:
            _consume_donated(e, bufs, num_args, rd(a, f.options))
    for d, device in enumerate(e.devices):
        _write_outputs(e, outs[d], rd(rd(a, f.output_lists), A.POINTER * d), device)
        if rd(a, f.device_complete_events):
            wr(rd(a, f.device_complete_events), A.POINTER * d, _READY_EVENT.addr)


def _refuse_double_donation(e: Executable, arg_bufs: list, name: str) -> None:
    """A donated buffer passed twice would be consumed while another
    argument still reads it: refused before the run, as XLA does."""
    for p in sorted(e.donated):
        if p >= len(arg_bufs):
            continue
        for i, other in enumerate(arg_bufs):
            if i != p and other is arg_bufs[p]:
                raise _PjrtError(A.INVALID_ARGUMENT,
                                 f"xla_gpu: attempt to donate the same buffer twice in "
                                 f"'{name}' (argument {p} is donated and also passed as "
                                 f"argument {i})")


def _buffer(a, field: int, what) -> Buffer:
    return _get(rd(a, field), Buffer, what)


@slot
def Buffer_Destroy(a):
    addr = rd(a, A.BUFFER_DESTROY.buffer)
    b = _objects.get(addr)
    if b.__class__ is np.ndarray or (b is None and addr in _objects):
        # A library-made result whose destroy did not reach the library
        # (it answers these itself): its block is left, its array goes.
        _objects.pop(addr, None)
        return
    if isinstance(b, Buffer):
        b.release()


@slot
def Buffer_ElementType(a):
    f = A.BUFFER_ELEMENT_TYPE
    wr_i32(a, f.type, _buffer(a, f.buffer, "PJRT_Buffer_ElementType").code)


@slot
def Buffer_Dimensions(a):
    # Also Buffer_UnpaddedDimensions (same layout).
    b = _buffer(a, A.BUFFER_DIMENSIONS.buffer, "PJRT_Buffer_Dimensions")
    wr(a, A.BUFFER_DIMENSIONS.dims, C.addressof(b.dims))
    wr(a, A.BUFFER_DIMENSIONS.num_dims, len(b.shape))


IMPL["Buffer_UnpaddedDimensions"] = Buffer_Dimensions


@slot
def Buffer_DynamicDimensionIndices(a):
    wr(a, A.BUFFER_DYNAMIC_DIMENSION_INDICES.dynamic_dim_indices, 0)
    wr(a, A.BUFFER_DYNAMIC_DIMENSION_INDICES.num_dynamic_dims, 0)


@slot
def Buffer_GetMemoryLayout(a):
    b = _buffer(a, A.BUFFER_GET_MEMORY_LAYOUT.buffer, "PJRT_Buffer_GetMemoryLayout")
    # An embedded PJRT_Buffer_MemoryLayout: dense major-to-minor, no tiles.
    m, t = A.MEMORY_LAYOUT, A.MEMORY_LAYOUT_TILED
    layout = a + A.BUFFER_GET_MEMORY_LAYOUT.layout
    C.memset(layout, 0, m.size)
    wr(layout, m.struct_size, m.size)
    tiled = layout + m.tiled
    wr(tiled, t.struct_size, t.size)
    wr(tiled, t.minor_to_major, C.addressof(b.minor_to_major))
    wr(tiled, t.minor_to_major_size, len(b.shape))
    wr_i32(layout, m.type, A.MEMORY_LAYOUT_TYPE.Tiled)


@slot
def Buffer_OnDeviceSizeInBytes(a):
    f = A.BUFFER_ON_DEVICE_SIZE_IN_BYTES
    wr(a, f.on_device_size_in_bytes, _buffer(a, f.buffer, "PJRT_Buffer_OnDeviceSizeInBytes").nbytes)


@slot
def Buffer_Device(a):
    f = A.BUFFER_DEVICE
    wr(a, f.device, _buffer(a, f.buffer, "PJRT_Buffer_Device").device.addr)


@slot
def Buffer_Memory(a):
    f = A.BUFFER_MEMORY
    wr(a, f.memory, _buffer(a, f.buffer, "PJRT_Buffer_Memory").memory.addr)


@slot
def Buffer_Delete(a):
    b = _buffer(a, A.BUFFER_DELETE.buffer, "PJRT_Buffer_Delete")
    with _lock:
        b.mark_deleted()
        if b.external_refs == 0:   # a numpy view still reading it keeps it
            b.array = None


@slot
def Buffer_IsDeleted(a):
    f = A.BUFFER_IS_DELETED
    wr_bool(a, f.is_deleted, _buffer(a, f.buffer, "PJRT_Buffer_IsDeleted").deleted)


@slot
def Buffer_IsOnCpu(a):
    wr_bool(a, A.BUFFER_IS_ON_CPU.is_on_cpu, bool(_ON_CPU))


@slot
def Buffer_ReadyEvent(a):
    b = _buffer(a, A.BUFFER_READY_EVENT.buffer, "PJRT_Buffer_ReadyEvent")
    event = (Event(Error(A.FAILED_PRECONDITION, "xla_gpu: the buffer was deleted"))
             if b.deleted else _READY_EVENT)
    wr(a, A.BUFFER_READY_EVENT.event, event.addr)


def _dense_layout(layout: int, ndim: int) -> bool:
    if not layout:
        return True
    m, t = A.MEMORY_LAYOUT, A.MEMORY_LAYOUT_TILED
    if rd_i32(layout, m.type) != A.MEMORY_LAYOUT_TYPE.Tiled:   # strides layout
        return False
    tiled = layout + m.tiled
    m2m = A.rd_i64s(rd(tiled, t.minor_to_major), rd(tiled, t.minor_to_major_size))
    return m2m == list(reversed(range(ndim))) and rd(tiled, t.num_tiles) == 0


@slot
def Buffer_ToHostBuffer(a):
    f = A.BUFFER_TO_HOST_BUFFER
    b = _buffer(a, f.src, "PJRT_Buffer_ToHostBuffer")
    array = b.live_array("PJRT_Buffer_ToHostBuffer")
    if not _dense_layout(rd(a, f.host_layout), len(b.shape)):
        raise _PjrtError(A.UNIMPLEMENTED, "xla_gpu: only dense major-to-minor host layouts")
    dst = rd(a, f.dst)
    if _CUDA is not None:
        if not dst:   # the size alone: no copy
            wr(a, f.dst_size, _host_nbytes(b))
            return None
        array = _device_to_host(b, array)
    if not dst:
        wr(a, f.dst_size, array.nbytes)
        return None
    if rd(a, f.dst_size) < array.nbytes:
        raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: host buffer of {rd(a, f.dst_size)} bytes "
                         f"for a {array.nbytes}-byte array")
    C.memmove(dst, array.ctypes.data, array.nbytes)
    wr(a, f.event, _READY_EVENT.addr)


def _host_nbytes(b: Buffer) -> int:
    """The bytes of `b` in host memory (its PJRT type's numpy dtype)."""
    dtype = A.BUFFER_TYPES.get(b.code)
    if dtype is None:
        return b.nbytes
    count = 1
    for d in b.shape:
        count *= d
    return count * np.dtype(dtype).itemsize


def _device_to_host(b: Buffer, payload) -> np.ndarray:
    """A device buffer's contents on the host, in its PJRT type's dtype
    (sub-byte integers are kept a byte each, as numpy's ml_dtypes do)."""
    return _host_copy(payload, b.code)


def _host_copy(payload, code: int) -> np.ndarray:
    """`payload` (a device array, cuda) on the host in PJRT type `code`'s dtype."""
    host = _CUDA.download(payload)
    dtype = A.BUFFER_TYPES.get(code)
    if dtype is not None and host.dtype != dtype:
        host = host.astype(dtype)
    return host


def _copy_to(b: Buffer, memory: "Memory") -> Buffer:
    """A copy of `b` in `memory` (of its device or another). On cuda a
    host memory holds a numpy array and the device's a device array: a
    copy between them is a download or an upload."""
    payload = b.live_array("copy")
    if _CUDA is not None:
        was_host = isinstance(payload, np.ndarray)
        if memory.on_host:
            payload = _device_to_host(b, payload) if not was_host else payload.copy()
        elif was_host:
            payload = _CUDA.upload(np.ascontiguousarray(payload))
        else:
            payload = _CUDA.copy(payload)
        return Buffer(payload, memory.device, b.code, memory)
    return Buffer(payload.copy(), memory.device, b.code, memory)


@slot
def Buffer_CopyToDevice(a):
    f = A.BUFFER_COPY_TO_DEVICE
    b = _buffer(a, A.BUFFER_COPY_TO_DEVICE.buffer, "PJRT_Buffer_CopyToDevice")
    device = _get(rd(a, f.dst_device), Device, "PJRT_Buffer_CopyToDevice device")
    # To the device's own memory, as XLA's CopyToDevice (its default memory).
    wr(a, f.dst_buffer, _copy_to(b, device.memory).addr)


@slot
def Buffer_CopyToMemory(a):
    f = A.BUFFER_COPY_TO_MEMORY
    b = _buffer(a, A.BUFFER_COPY_TO_MEMORY.buffer, "PJRT_Buffer_CopyToMemory")
    memory = _get(rd(a, f.dst_memory), Memory, "PJRT_Buffer_CopyToMemory memory")
    wr(a, f.dst_buffer, _copy_to(b, memory).addr)


@slot
def Buffer_UnsafePointer(a):
    # Also Buffer_OpaqueDeviceMemoryDataPointer (same layout).
    f = A.BUFFER_UNSAFE_POINTER
    b = _buffer(a, f.buffer, "PJRT_Buffer_UnsafePointer")
    array = b.live_array("UnsafePointer")
    # cuda: the device address (as jax's cuda plugin gives it).
    wr(a, f.buffer_pointer, array.ctypes.data if _CUDA is None else _CUDA.pointer(array))


IMPL["Buffer_OpaqueDeviceMemoryDataPointer"] = Buffer_UnsafePointer


@slot
def Buffer_IncreaseExternalReferenceCount(a):
    b = _buffer(a, A.BUFFER_INCREASE_EXTERNAL_REFERENCE_COUNT.buffer,
                "PJRT_Buffer_IncreaseExternalReferenceCount")
    with _lock:
        b.external_refs += 1


@slot
def Buffer_DecreaseExternalReferenceCount(a):
    b = _buffer(a, A.BUFFER_DECREASE_EXTERNAL_REFERENCE_COUNT.buffer,
                "PJRT_Buffer_DecreaseExternalReferenceCount")
    with _lock:
        if b.external_refs <= 0:
            raise _PjrtError(A.FAILED_PRECONDITION, "xla_gpu: external reference count is 0")
        b.external_refs -= 1
        if b.external_refs == 0 and b.deleted:
            b.array = None


# ----------------------------------------------------------------------------- the table
def _new_error(code: int, message: str) -> int:
    """A PJRT_Error* for jaxlib; tried twice, as a pending exception of the
    calling thread can surface in the first try (see _make_slot)."""
    for attempt in (0, 1):
        try:
            return Error(code, message).addr
        except BaseException:  # noqa: BLE001
            if attempt:
                raise
    return 0


def _make_slot(name: str, finalizing=sys.is_finalizing, base_exception=BaseException):
    # Nothing may escape a slot: ctypes would print the exception and hand
    # jaxlib an undefined return value (read as a PJRT_Error*: a crash).
    # jaxlib calls slots from deallocators, sometimes while a Python
    # exception is already set in the calling thread. libXlaGpuPjrt.so's
    # trampolines set it aside around the call; where the table is used
    # without them, that exception surfaces inside the slot's first
    # statements, so every slot tries twice.
    # At interpreter shutdown jaxlib still destroys (and queries) its arrays
    # and executables after the builtins and module globals are gone: any
    # lookup would crash, so a slot first asks `finalizing` (bound here, no
    # lookup) and then does nothing.
    # A slot another module implements (`_topology`'s) may be registered
    # after the table is built: looked up when it is called.
    fn = IMPL.get(name)
    if name.endswith("_Destroy") or name in A.VOID_SLOTS:
        # jaxlib aborts the process when a destroy fails: never report one
        # (a failed destroy only leaks).
        def destroy_call(args):
            for _ in (0, 1):
                try:
                    if finalizing():
                        return None
                    impl = fn or IMPL.get(name)
                    if impl is not None:
                        impl(args)
                    return None
                except base_exception:
                    continue
            return None
        if name in A.VOID_SLOTS:
            return A.VOID_SLOT_FN(destroy_call)
        return A.SLOT_FN(destroy_call)

    def call(args):
        for attempt in (0, 1):
            try:
                if finalizing():
                    return None
                impl = fn or IMPL.get(name)
                if impl is None:
                    raise _PjrtError(A.UNIMPLEMENTED,
                                     f"unimplemented: PJRT_{name} is not implemented by xla_gpu")
                return impl(args) or None
            except base_exception as exc:
                try:
                    if isinstance(exc, _PjrtError):
                        return _new_error(exc.code, str(exc))
                    if attempt:
                        return _new_error(A.INTERNAL,
                                          f"xla_gpu PJRT_{name}: {type(exc).__name__}: {exc}")
                except base_exception:
                    continue
        return None

    return A.SLOT_FN(call)


def _no_live_set(addr: int) -> None:
    return None


# libXlaGpuPjrt.so's live set (XlaGpuPjrtAddLive, XlaGpuPjrtRemoveLive):
# executables and memories in it have their getters answered without the
# GIL. Without the library, nothing to tell.
_add_live = _remove_live = _no_live_set


def use_live_set(add: int, remove: int) -> None:
    """Tells libXlaGpuPjrt.so about every executable and memory from now on
    (`add`, `remove`: its XlaGpuPjrtAddLive and XlaGpuPjrtRemoveLive). Only
    before jax makes the client: one made earlier would never be added."""
    global _add_live, _remove_live
    _add_live = _keep_alive(C.CFUNCTYPE(C.c_int, C.c_void_p)(add))
    _remove_live = _keep_alive(C.CFUNCTYPE(None, C.c_void_p)(remove))


def use_memory_user_data(get_user_data: int, set_user_data: int) -> None:
    """Points the PJRT_Memory vtable at the library's user-data functions
    (jaxlib reads its data back on every execute: kept in C, that read does
    not enter Python). Only before jax has loaded the plugin: data set
    through the Python functions would not be found there."""
    wr(C.addressof(_MEMORY_VTABLE), A.MEMORY_VTABLE.get_user_data, get_user_data)
    wr(C.addressof(_MEMORY_VTABLE), A.MEMORY_VTABLE.set_user_data, set_user_data)


def execute_hooks() -> tuple[int, int] | None:
    """What libXlaGpuPjrt.so's Execute calls: xla_gpu.runtime._host_run's C
    entry and the context variable of the active xla_gpu trace (as
    PyObject*); None where the runtime has no such entry."""
    try:
        from ..runtime import _host_run
        from .. import _trace
    except ImportError:
        return None
    address = getattr(_host_run, "call_address", None)
    if address is None or not hasattr(_host_run.HostRun, "outputs"):
        return None
    return address(), id(_trace._active)


def fast_path_handles() -> tuple[int, int]:
    """What libXlaGpuPjrt.so's fast paths read: the handle map (a dict, as a
    PyObject*) and the shared ready event's handle."""
    return id(_objects), _READY_EVENT.addr


_TABLE = None


def api_table() -> int:
    """The address of the process-wide PJRT_Api table (built once)."""
    global _TABLE
    with _lock:
        if _TABLE is None:
            api, v = A.API, A.API_VERSION
            table = array_type(A.u64, api.size // 8)()
            base = C.addressof(table)
            wr(base, api.struct_size, api.size)
            wr(base, api.extension_start, 0)
            version = base + api.pjrt_api_version
            wr(version, v.struct_size, v.size)
            wr(version, v.extension_start, 0)
            wr_i32(version, v.major_version, A.API_MAJOR)
            wr_i32(version, v.minor_version, A.API_MINOR)
            fns = [_make_slot(name) for name in A.SLOTS]
            for name, f in zip(A.SLOTS, fns):
                wr(base, A.slot_offset(name), C.cast(f, C.c_void_p).value)
            _keep.extend(fns)
            _keep.append(table)
            _TABLE = table
        return C.addressof(_TABLE)


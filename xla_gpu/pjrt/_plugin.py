"""The PJRT C API table, implemented in Python over xla_gpu (cpu target).

jaxlib calls the slots from any thread (compiles run on its own worker
threads with the GIL released); ctypes takes the GIL on entry. Handle maps
are shared state, so every change to them holds `_lock`; runs and compiles
happen outside it, so several threads can dispatch at once.

Every slot catches every Python exception and returns it as a PJRT_Error:
jax raises it as a Python exception, the process never crashes on our side.
Slots xla_gpu does not implement answer "unimplemented: PJRT_<name> ...".
Execution is synchronous: outputs exist when Execute returns, so every event
is born ready (with the run's error, if any).
"""
from __future__ import annotations

import ctypes as C
import hashlib
import logging
import re
import sys
import threading

import numpy as np

from . import _abi as A
from ._abi import rd, rd_i32, wr, wr_bool, wr_i32

logger = logging.getLogger(__name__)

PLATFORM = "xla_gpu"
TARGET = "cpu"
MEMORY_KIND = "device"

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


class _Handle:
    """A plugin object with a stable C address (what jaxlib holds). The
    first word is a vtable pointer for PJRT_Error and PJRT_Memory."""

    def __init__(self, vtable: int = 0):
        self._block = (A.u64 * 2)(vtable, 0)
        self.addr = C.addressof(self._block)
        with _lock:
            _objects[self.addr] = self

    def release(self) -> None:
        with _lock:
            _objects.pop(self.addr, None)


def _get(addr: int, kind: type, what: str):
    obj = _objects.get(addr)
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
        return Error(self.code, self.message.buf.value.decode(errors="replace"))


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


_err_fns = [_keep_alive(A.ERR_DESTROY_FN(_err_destroy)), _keep_alive(A.ERR_MESSAGE_FN(_err_message)),
            _keep_alive(A.ERR_CODE_FN(_err_code)), _keep_alive(A.ERR_PAYLOAD_FN(_err_payloads))]
# {struct_size, instance_size, extension_start, destroy, message, get_code, for_each_payload}
_ERROR_VTABLE = _keep_alive((A.u64 * 7)(56, 16, 0, *[C.cast(f, C.c_void_p).value for f in _err_fns]))


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


# ----------------------------------------------------------------------------- devices
class Memory(_Handle):
    def __init__(self, index: int):
        super().__init__(C.addressof(_MEMORY_VTABLE))
        self.index = index
        self.user_data: dict[int, tuple[int, int]] = {}
        self.text = A.CString(f"XlaGpuMemory(id={index}, kind={MEMORY_KIND})")
        self.device: Device | None = None
        self.devices_array = None


def _mem_get(m, key):
    with _lock:
        return _objects[m].user_data.get(key or 0, (0, 0))[0] or None


def _mem_set(m, key, data, dtor):
    with _lock:
        old = _objects[m].user_data.get(key or 0)
        _objects[m].user_data[key or 0] = (data or 0, dtor or 0)
    if old and old[1] and old[0] and old[0] != (data or 0):
        A.DELETER_FN(old[1])(old[0])


_mem_fns = [_keep_alive(A.MEM_GET_FN(_mem_get)), _keep_alive(A.MEM_SET_FN(_mem_set))]
# {struct_size, extension_start, instance_struct_size, get_user_data, set_user_data}
_MEMORY_VTABLE = _keep_alive((A.u64 * 5)(40, 0, 16, *[C.cast(f, C.c_void_p).value for f in _mem_fns]))


class Device(_Handle):
    def __init__(self, index: int):
        super().__init__()
        self.index = index
        self.description = DeviceDescription(self)
        self.memory = Memory(index)
        self.memory.device = self
        self.memories_array = (A.u64 * 1)(self.memory.addr)
        self.memory.devices_array = (A.u64 * 1)(self.addr)


class DeviceDescription(_Handle):
    def __init__(self, device: Device):
        super().__init__()
        self.device = device
        self.kind = A.CString(f"xla_gpu ({TARGET} target)")
        self.text = A.CString(f"XlaGpuDevice(id={device.index}, target={TARGET})")


class Client(_Handle):
    def __init__(self, num_devices: int = 1):
        super().__init__()
        self.devices = [Device(i) for i in range(num_devices)]
        self.devices_array = (A.u64 * num_devices)(*[d.addr for d in self.devices])
        self.memories_array = (A.u64 * num_devices)(*[d.memory.addr for d in self.devices])


_CLIENT: Client | None = None


def _client() -> Client:
    global _CLIENT
    with _lock:
        if _CLIENT is None:
            _CLIENT = Client(1)
        return _CLIENT


# ----------------------------------------------------------------------------- buffers
class Buffer(_Handle):
    def __init__(self, array: np.ndarray, device: Device):
        super().__init__()
        self.array: np.ndarray | None = array
        self.device = device
        self.dtype = array.dtype
        self.code = A.DTYPE_CODES.get(array.dtype)
        if self.code is None:
            raise _PjrtError(A.UNIMPLEMENTED, f"xla_gpu: no PJRT buffer type for dtype {array.dtype}")
        self.shape = array.shape
        self.nbytes = array.nbytes
        n = max(1, array.ndim)
        self.dims = (A.i64 * n)(*array.shape)
        self.minor_to_major = (A.i64 * n)(*reversed(range(array.ndim)))
        self.external_refs = 0
        self.deleted = False

    def live_array(self, what: str) -> np.ndarray:
        if self.deleted or self.array is None:
            raise _PjrtError(A.FAILED_PRECONDITION, f"xla_gpu: {what}: the buffer was deleted")
        return self.array


def _host_array(addr: int, dtype: np.dtype, dims: list[int], strides: list[int]) -> np.ndarray:
    """Copies a host buffer (any byte strides) into a fresh C-ordered array."""
    count = int(np.prod(dims)) if dims else 1
    if count == 0:
        return np.zeros(dims, dtype)
    if not strides:
        strides = list(np.zeros(dims, dtype).strides) if dims else []
    lo = sum((d - 1) * s for d, s in zip(dims, strides) if s < 0)
    hi = sum((d - 1) * s for d, s in zip(dims, strides) if s > 0) + dtype.itemsize
    raw = (C.c_char * (hi - lo)).from_address(addr + lo)
    view = np.ndarray(dims, dtype, buffer=raw, offset=-lo, strides=strides)
    return np.array(view, order="C", copy=True)


# ----------------------------------------------------------------------------- executables
class Executable(_Handle):
    """One compiled program; jaxlib sees it through two handles, the
    PJRT_LoadedExecutable (this object) and its PJRT_Executable view."""

    def __init__(self, exe, computation, mlir_code: bytes, hlo_text: str):
        super().__init__()
        self.exe = exe
        self.mlir_code = mlir_code
        self.hlo_text = hlo_text
        # Parameters jax donated (input_output_alias): consumed by a run.
        self.donated = _aliased_parameters(hlo_text)
        self.deleted = False
        self.view = _ExecutableView(self)
        shape = computation.program_shape()
        result = shape.result_shape()
        leaves = result.tuple_shapes() if result.is_tuple() else [result]
        self.num_params = len(shape.parameter_shapes())
        self.out_dtypes = [np.dtype(s.numpy_dtype()) for s in leaves]
        self.out_dims = [tuple(s.dimensions()) for s in leaves]
        self.num_outputs = len(leaves)
        n = max(1, self.num_outputs)
        self.out_types = (C.c_int * n)(*[A.DTYPE_CODES.get(d, 0) for d in self.out_dtypes])
        flat = [d for dims in self.out_dims for d in dims]
        self.out_flat_dims = (A.i64 * max(1, len(flat)))(*flat)
        self.out_dim_sizes = (C.c_size_t * n)(*[len(d) for d in self.out_dims])
        kinds = max(1, self.num_outputs, self.num_params)
        self.kind = A.CString(MEMORY_KIND)
        self.kinds = (A.u64 * kinds)(*([self.kind.addr] * kinds))
        self.kind_sizes = (C.c_size_t * kinds)(*([self.kind.size] * kinds))
        self.name = A.CString(computation.name())
        text = exe.as_text()
        self.fingerprint = A.CString(hashlib.sha256(f"{TARGET}\n{text}".encode()).hexdigest())
        self._optimized: tuple[bytes, A.CString] | None = None
        self._cost: A.NamedValues | None = None

    def optimized_program(self) -> tuple[bytes, A.CString]:
        """Our optimized module as StableHLO bytecode (format "mlir"): jaxlib
        turns it back into HLO for `compiled.as_text()`. Falls back to the
        program jax handed over where XLA cannot parse our text."""
        with _lock:
            if self._optimized is None:
                try:
                    from jax._src.lib import _jax
                    import jaxlib._hlo as hlo
                    text = _IMPORTER_UNSAFE.sub("", self.exe.as_text())
                    proto = hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
                    code = bytes(_jax.mlir.hlo_to_stablehlo(proto))
                except Exception as exc:  # noqa: BLE001 - a view, never fatal
                    logger.debug("xla_gpu: optimized HLO not convertible for jax: %s", exc)
                    code = self.mlir_code
                self._optimized = (code, A.CString(code))
            return self._optimized

    def cost(self) -> A.NamedValues:
        with _lock:
            if self._cost is None:
                m = self.exe.memory_analysis()
                moved = m.argument_size_in_bytes + m.output_size_in_bytes
                self._cost = A.NamedValues([("bytes accessed", float(moved))])
            return self._cost


# jaxlib's HLO-to-StableHLO importer crashes the process (a null attribute,
# not an error) on dot algorithms StableHLO cannot spell, e.g.
# dot_bf16_bf16_f32_x9. The optimized program is a view for `as_text()` and
# jax's sharding queries, which never read the algorithm: it is left out.
_IMPORTER_UNSAFE = re.compile(r",\s*algorithm=[\w]+")


class _ExecutableView(_Handle):
    def __init__(self, loaded: Executable):
        super().__init__()
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


def _aliased_parameters(hlo_text: str) -> frozenset[int]:
    header = hlo_text.split("\n", 1)[0]
    m = _ALIAS.search(header)
    return frozenset(int(p) for p in _ALIAS_PARAM.findall(m.group(1))) if m else frozenset()


def _compile(code: bytes, fmt: str, options: bytes) -> Executable:
    if fmt != "mlir":
        raise _PjrtError(A.INVALID_ARGUMENT,
                         f"xla_gpu: program format '{fmt}' is not supported (expected 'mlir')")
    from jax._src.lib import _jax, xla_client
    build = xla_client.CompileOptions.ParseFromString(options).executable_build_options
    if build.num_replicas > 1 or build.num_partitions > 1:
        raise _PjrtError(A.UNIMPLEMENTED,
                         f"xla_gpu: num_replicas={build.num_replicas} num_partitions="
                         f"{build.num_partitions}: only single-device programs are supported")
    computation = _jax.mlir.mlir_module_to_xla_computation(code, use_tuple_args=False,
                                                             return_tuple=False)
    import xla_gpu
    text = computation.as_hlo_text()
    exe = xla_gpu.compile(text, target=TARGET)
    return Executable(exe, computation, code, text)


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


# Serialized executables (jax's persistent compilation cache): the HLO text
# and the program jax handed over; loading compiles the text again, which
# xla_gpu's own compile cache answers.
_SERIAL_MAGIC = b"XLA_GPU_PJRT_EXE1\0"


def _serialize(e: Executable) -> bytes:
    text = e.hlo_text.encode()
    return _SERIAL_MAGIC + len(text).to_bytes(8, "little") + text + e.mlir_code


def _deserialize(blob: bytes) -> Executable:
    n = len(_SERIAL_MAGIC)
    if not blob.startswith(_SERIAL_MAGIC) or len(blob) < n + 8:
        raise _PjrtError(A.INVALID_ARGUMENT, "xla_gpu: not a serialized xla_gpu executable")
    size = int.from_bytes(blob[n:n + 8], "little")
    if n + 8 + size > len(blob):
        raise _PjrtError(A.INVALID_ARGUMENT, "xla_gpu: truncated serialized executable")
    text = blob[n + 8:n + 8 + size].decode()
    code = blob[n + 8 + size:]
    from jax._src.lib import _jax
    computation = _jax.mlir.mlir_module_to_xla_computation(code, use_tuple_args=False,
                                                             return_tuple=False)
    import xla_gpu
    return Executable(xla_gpu.compile(text, target=TARGET), computation, code, text)


# ----------------------------------------------------------------------------- the slots
IMPL: dict = {}


def slot(fn):
    IMPL[fn.__name__] = fn
    return fn


@slot
def Error_Destroy(a):
    _err_destroy(rd(a, 16))


@slot
def Error_Message(a):
    obj = _objects[rd(a, 16)]
    wr(a, 24, obj.message.addr)
    wr(a, 32, obj.message.size)


@slot
def Error_GetCode(a):
    wr_i32(a, 24, _objects[rd(a, 16)].code)


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
    wr(a, 16, _ATTRIBUTES.addr)
    wr(a, 24, _ATTRIBUTES.count)


@slot
def Event_Destroy(a):
    ev = _objects.get(rd(a, 16))
    if isinstance(ev, Event):
        ev.release()


@slot
def Event_IsReady(a):
    _get(rd(a, 16), Event, "PJRT_Event_IsReady")
    wr_bool(a, 24, True)


@slot
def Event_Error(a):
    return _get(rd(a, 16), Event, "PJRT_Event_Error").error_copy()


@slot
def Event_Await(a):
    return _get(rd(a, 16), Event, "PJRT_Event_Await").error_copy()


@slot
def Event_OnReady(a):
    ev = _get(rd(a, 16), Event, "PJRT_Event_OnReady")
    # The callback takes ownership of the error it is given.
    A.ON_READY_FN(rd(a, 24))(ev.error_copy() or None, rd(a, 32) or None)


@slot
def Client_Create(a):
    options = A.read_named_values(rd(a, 16), rd(a, 24))
    if options:
        logger.debug("xla_gpu PJRT client options ignored: %s", options)
    wr(a, 64, _client().addr)


@slot
def Client_Destroy(a):
    return None   # the client and its devices live as long as the process


_PLATFORM_NAME = _keep_alive(A.CString(PLATFORM))


def _platform_version() -> A.CString:
    # Part of jax's persistent-cache key. Never contains "cuda": jax's test
    # utilities read that word as "running on CUDA".
    from importlib.metadata import PackageNotFoundError, version
    try:
        v = version("xla_gpu")
    except PackageNotFoundError:
        v = "unknown"
    return A.CString(f"xla_gpu {v} ({TARGET} target)")


_PLATFORM_VERSION = _keep_alive(_platform_version())


@slot
def Client_PlatformName(a):
    wr(a, 24, _PLATFORM_NAME.addr)
    wr(a, 32, _PLATFORM_NAME.size)


@slot
def Client_ProcessIndex(a):
    wr_i32(a, 24, 0)


@slot
def Client_PlatformVersion(a):
    wr(a, 24, _PLATFORM_VERSION.addr)
    wr(a, 32, _PLATFORM_VERSION.size)


@slot
def Client_Devices(a):
    c = _get(rd(a, 16), Client, "PJRT_Client_Devices")
    wr(a, 24, C.addressof(c.devices_array))
    wr(a, 32, len(c.devices))


IMPL["Client_AddressableDevices"] = Client_Devices   # every device is addressable


def _lookup(a, what):
    c = _get(rd(a, 16), Client, what)
    i = rd_i32(a, 24)
    if not 0 <= i < len(c.devices):
        raise _PjrtError(A.INVALID_ARGUMENT,
                         f"xla_gpu: no device with id {i} (there are {len(c.devices)})")
    wr(a, 32, c.devices[i].addr)


@slot
def Client_LookupDevice(a):
    _lookup(a, "PJRT_Client_LookupDevice")


@slot
def Client_LookupAddressableDevice(a):
    _lookup(a, "PJRT_Client_LookupAddressableDevice")


@slot
def Client_AddressableMemories(a):
    c = _get(rd(a, 16), Client, "PJRT_Client_AddressableMemories")
    wr(a, 24, C.addressof(c.memories_array))
    wr(a, 32, len(c.devices))


@slot
def Client_DefaultDeviceAssignment(a):
    c = _get(rd(a, 16), Client, "PJRT_Client_DefaultDeviceAssignment")
    replicas, partitions, size, out = rd_i32(a, 24), rd_i32(a, 28), rd(a, 32), rd(a, 40)
    if replicas * partitions > len(c.devices) or replicas * partitions > size:
        raise _PjrtError(A.INVALID_ARGUMENT,
                         f"xla_gpu: {replicas} replicas x {partitions} partitions need more "
                         f"than the {len(c.devices)} device(s) of this client")
    for i in range(replicas * partitions):
        C.c_int.from_address(out + 4 * i).value = i


@slot
def Client_Compile(a):
    program = rd(a, 24)
    code = A.rd_bytes(rd(program, 16), rd(program, 24))
    fmt = A.rd_bytes(rd(program, 32), rd(program, 40)).decode(errors="replace")
    options = A.rd_bytes(rd(a, 32), rd(a, 40))
    try:
        exe = _on_big_stack(_compile, code, fmt, options)
    except _PjrtError:
        raise
    except Exception as exc:  # noqa: BLE001 - becomes the jax exception's message
        raise _PjrtError(_error_code_of(exc), f"xla_gpu compile: {type(exc).__name__}: {exc}") from exc
    wr(a, 48, exe.addr)


@slot
def Client_BufferFromHostBuffer(a):
    c = _get(rd(a, 16), Client, "PJRT_Client_BufferFromHostBuffer")
    code = rd_i32(a, 32)
    dtype = A.BUFFER_TYPES.get(code)
    if dtype is None:
        raise _PjrtError(A.UNIMPLEMENTED, f"xla_gpu: PJRT buffer type {code} is not supported")
    dims = A.rd_i64s(rd(a, 40), rd(a, 48))
    strides = A.rd_i64s(rd(a, 56), rd(a, 64)) if rd(a, 56) else []
    if rd(a, 96):
        raise _PjrtError(A.UNIMPLEMENTED, "xla_gpu: device_layout in BufferFromHostBuffer")
    device_addr, memory_addr = rd(a, 80), rd(a, 88)
    if device_addr:
        device = _get(device_addr, Device, "PJRT_Client_BufferFromHostBuffer device")
    elif memory_addr:
        device = _get(memory_addr, Memory, "PJRT_Client_BufferFromHostBuffer memory").device
    else:
        device = c.devices[0]
    array = _host_array(rd(a, 24), dtype, dims, strides)
    # The data is copied: the host buffer is free again as soon as we return.
    done = Event()
    buf = Buffer(array, device)
    wr(a, 104, done.addr)
    wr(a, 112, buf.addr)


@slot
def DeviceDescription_Id(a):
    wr_i32(a, 24, _get(rd(a, 16), DeviceDescription, "PJRT_DeviceDescription_Id").device.index)


@slot
def DeviceDescription_ProcessIndex(a):
    wr_i32(a, 24, 0)


@slot
def DeviceDescription_Attributes(a):
    wr(a, 24, 0)   # num_attributes
    wr(a, 32, 0)


@slot
def DeviceDescription_Kind(a):
    d = _get(rd(a, 16), DeviceDescription, "PJRT_DeviceDescription_Kind")
    wr(a, 24, d.kind.addr)
    wr(a, 32, d.kind.size)


@slot
def DeviceDescription_DebugString(a):
    d = _get(rd(a, 16), DeviceDescription, "PJRT_DeviceDescription_DebugString")
    wr(a, 24, d.text.addr)
    wr(a, 32, d.text.size)


IMPL["DeviceDescription_ToString"] = DeviceDescription_DebugString


@slot
def Device_GetDescription(a):
    wr(a, 24, _get(rd(a, 16), Device, "PJRT_Device_GetDescription").description.addr)


@slot
def Device_IsAddressable(a):
    wr_bool(a, 24, True)


@slot
def Device_LocalHardwareId(a):
    wr_i32(a, 24, _get(rd(a, 16), Device, "PJRT_Device_LocalHardwareId").index)


@slot
def Device_AddressableMemories(a):
    d = _get(rd(a, 16), Device, "PJRT_Device_AddressableMemories")
    wr(a, 24, C.addressof(d.memories_array))
    wr(a, 32, 1)


@slot
def Device_DefaultMemory(a):
    wr(a, 24, _get(rd(a, 16), Device, "PJRT_Device_DefaultMemory").memory.addr)


_NO_ATTRIBUTES_DELETER = _keep_alive(A.DELETER_FN(lambda p: None))


@slot
def Device_GetAttributes(a):
    wr(a, 24, 0)
    wr(a, 32, 0)
    wr(a, 40, 0)
    wr(a, 48, C.cast(_NO_ATTRIBUTES_DELETER, C.c_void_p).value)


@slot
def Memory_Id(a):
    wr_i32(a, 24, _get(rd(a, 16), Memory, "PJRT_Memory_Id").index)


_MEMORY_KIND = _keep_alive(A.CString(MEMORY_KIND))


@slot
def Memory_Kind(a):
    wr(a, 24, _MEMORY_KIND.addr)
    wr(a, 32, _MEMORY_KIND.size)


@slot
def Memory_Kind_Id(a):
    wr_i32(a, 24, 0)


@slot
def Memory_DebugString(a):
    m = _get(rd(a, 16), Memory, "PJRT_Memory_DebugString")
    wr(a, 24, m.text.addr)
    wr(a, 32, m.text.size)


IMPL["Memory_ToString"] = Memory_DebugString


@slot
def Memory_AddressableByDevices(a):
    m = _get(rd(a, 16), Memory, "PJRT_Memory_AddressableByDevices")
    wr(a, 24, C.addressof(m.devices_array))
    wr(a, 32, 1)


@slot
def Executable_Destroy(a):
    return None   # the view goes with its loaded executable


@slot
def Executable_Name(a):
    e = _executable(rd(a, 16), "PJRT_Executable_Name")
    wr(a, 24, e.name.addr)
    wr(a, 32, e.name.size)


@slot
def Executable_NumReplicas(a):
    wr(a, 24, 1)


@slot
def Executable_NumPartitions(a):
    wr(a, 24, 1)


@slot
def Executable_NumOutputs(a):
    wr(a, 24, _executable(rd(a, 16), "PJRT_Executable_NumOutputs").num_outputs)


@slot
def Executable_SizeOfGeneratedCodeInBytes(a):
    e = _executable(rd(a, 16), "PJRT_Executable_SizeOfGeneratedCodeInBytes")
    wr(a, 24, e.exe.memory_analysis().generated_code_size_in_bytes)


@slot
def Executable_OutputElementTypes(a):
    e = _executable(rd(a, 16), "PJRT_Executable_OutputElementTypes")
    wr(a, 24, C.addressof(e.out_types))
    wr(a, 32, e.num_outputs)


@slot
def Executable_OutputDimensions(a):
    e = _executable(rd(a, 16), "PJRT_Executable_OutputDimensions")
    wr(a, 24, e.num_outputs)
    wr(a, 32, C.addressof(e.out_flat_dims))
    wr(a, 40, C.addressof(e.out_dim_sizes))


def _write_memory_kinds(a, e, count):
    # Outputs and parameters share one memory-kind table (every buffer is device memory).
    wr(a, 24, count)
    wr(a, 32, C.addressof(e.kinds))
    wr(a, 40, C.addressof(e.kind_sizes))


@slot
def Executable_OutputMemoryKinds(a):
    e = _executable(rd(a, 16), "PJRT_Executable_OutputMemoryKinds")
    _write_memory_kinds(a, e, e.num_outputs)


@slot
def Executable_ParameterMemoryKinds(a):
    e = _executable(rd(a, 16), "PJRT_Executable_ParameterMemoryKinds")
    _write_memory_kinds(a, e, e.num_params)


@slot
def Executable_Fingerprint(a):
    e = _executable(rd(a, 16), "PJRT_Executable_Fingerprint")
    wr(a, 24, e.fingerprint.addr)
    wr(a, 32, e.fingerprint.size)


_MLIR_FORMAT = _keep_alive(A.CString("mlir"))


@slot
def Executable_OptimizedProgram(a):
    # Two calls: code == NULL asks for the size, then jaxlib passes a buffer.
    e = _executable(rd(a, 16), "PJRT_Executable_OptimizedProgram")
    program = rd(a, 24)
    code, buf = e.optimized_program()
    wr(program, 32, _MLIR_FORMAT.addr)
    wr(program, 40, _MLIR_FORMAT.size)
    if rd(program, 16):
        if rd(program, 24) < len(code):
            raise _PjrtError(A.INVALID_ARGUMENT, "xla_gpu: OptimizedProgram buffer too small")
        C.memmove(rd(program, 16), buf.addr, len(code))
    wr(program, 24, len(code))


@slot
def Executable_GetCostAnalysis(a):
    cost = _executable(rd(a, 16), "PJRT_Executable_GetCostAnalysis").cost()
    wr(a, 24, cost.count)
    wr(a, 32, cost.addr)


@slot
def Executable_GetCompiledMemoryStats(a):
    m = _executable(rd(a, 16), "PJRT_Executable_GetCompiledMemoryStats").exe.memory_analysis()
    fields = [m.generated_code_size_in_bytes, m.argument_size_in_bytes, m.output_size_in_bytes,
              m.alias_size_in_bytes, m.temp_size_in_bytes,
              m.host_generated_code_size_in_bytes, m.host_argument_size_in_bytes,
              m.host_output_size_in_bytes, m.host_alias_size_in_bytes, m.host_temp_size_in_bytes,
              m.peak_memory_in_bytes]
    size = rd(a, 0)
    for i, v in enumerate(fields):
        if 24 + 8 * i + 8 <= size:
            wr(a, 24 + 8 * i, v)
    # total_size_in_bytes (0.94), then the 0.104 fields total_allocation_bytes,
    # indefinite_allocations, peak_unpadded_heap_bytes.
    total = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
             - m.alias_size_in_bytes + m.generated_code_size_in_bytes)
    for off, v in ((112, total), (120, m.peak_memory_in_bytes), (128, 0),
                   (136, m.peak_memory_in_bytes)):
        if off + 8 <= size and off >= 24 + 8 * len(fields):
            wr(a, off, v)


_SERIALIZED_DELETER = _keep_alive(A.DELETER_FN(lambda p: None))


@slot
def Executable_Serialize(a):
    e = _executable(rd(a, 16), "PJRT_Executable_Serialize")
    blob = _serialize(e)
    with _lock:
        e.serialized = A.CString(blob)   # lives as long as the executable
    wr(a, 24, e.serialized.addr)
    wr(a, 32, len(blob))
    wr(a, 40, 0)
    wr(a, 48, C.cast(_SERIALIZED_DELETER, C.c_void_p).value)


@slot
def Executable_DeserializeAndLoad(a):
    _get(rd(a, 16), Client, "PJRT_Executable_DeserializeAndLoad")
    blob = A.rd_bytes(rd(a, 24), rd(a, 32))
    try:
        e = _on_big_stack(_deserialize, blob)
    except _PjrtError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _PjrtError(_error_code_of(exc), f"xla_gpu load: {type(exc).__name__}: {exc}") from exc
    wr(a, 40, e.addr)


@slot
def LoadedExecutable_Destroy(a):
    e = _objects.get(rd(a, 16))
    if isinstance(e, Executable):
        e.view.release()
        e.release()


@slot
def LoadedExecutable_GetExecutable(a):
    wr(a, 24, _executable(rd(a, 16), "PJRT_LoadedExecutable_GetExecutable").view.addr)


@slot
def LoadedExecutable_AddressableDevices(a):
    c = _client()
    wr(a, 24, C.addressof(c.devices_array))
    wr(a, 32, 1)


_LOGICAL_IDS = _keep_alive((C.c_int * 2)(0, 0))   # {replica 0, partition 0}


@slot
def LoadedExecutable_AddressableDeviceLogicalIds(a):
    wr(a, 24, C.addressof(_LOGICAL_IDS))
    wr(a, 32, 1)


# DeviceAssignmentProto{replica_count: 1, computation_count: 1,
# computation_devices: [{replica_device_ids: [0]}]}.
_ONE_DEVICE_ASSIGNMENT = _keep_alive(A.CString(bytes([0x08, 1, 0x10, 1, 0x1A, 3, 0x0A, 1, 0])))
_NO_DELETER = _keep_alive(A.DELETER_FN(lambda p: None))


@slot
def LoadedExecutable_GetDeviceAssignment(a):
    wr(a, 24, _ONE_DEVICE_ASSIGNMENT.addr)
    wr(a, 32, _ONE_DEVICE_ASSIGNMENT.size)
    wr(a, 40, 0)
    wr(a, 48, C.cast(_NO_DELETER, C.c_void_p).value)


@slot
def LoadedExecutable_Delete(a):
    _executable(rd(a, 16), "PJRT_LoadedExecutable_Delete").deleted = True


@slot
def LoadedExecutable_IsDeleted(a):
    wr_bool(a, 24, _executable(rd(a, 16), "PJRT_LoadedExecutable_IsDeleted").deleted)


@slot
def LoadedExecutable_Execute(a):
    e = _executable(rd(a, 16), "PJRT_LoadedExecutable_Execute")
    if e.deleted:
        raise _PjrtError(A.FAILED_PRECONDITION, f"xla_gpu: executable '{e.name.buf.value.decode()}' "
                         "was deleted")
    num_devices, num_args = rd(a, 40), rd(a, 48)
    if num_devices != 1 or rd(a, 72):
        raise _PjrtError(A.UNIMPLEMENTED, f"xla_gpu: execution on {num_devices} devices "
                         "(only single-device execution is supported)")
    arg_list = rd(rd(a, 32), 0)
    name = e.name.buf.value.decode()
    arg_bufs, args = [], []
    for i in range(num_args):
        buf = _get(rd(arg_list, 8 * i), Buffer, f"PJRT_LoadedExecutable_Execute argument {i}")
        args.append(buf.live_array(f"argument {i} of '{name}'"))
        arg_bufs.append(buf)
    try:
        outs = e.exe.run(*args)
    except Exception as exc:  # noqa: BLE001 - becomes the jax exception's message
        raise _PjrtError(_error_code_of(exc), f"xla_gpu run: {type(exc).__name__}: {exc}") from exc
    if len(outs) != e.num_outputs:
        raise _PjrtError(A.INTERNAL, f"xla_gpu run: {len(outs)} outputs, expected {e.num_outputs}")
    if e.donated:
        options = rd(a, 24)
        keep = set(A.rd_i64s(rd(options, 56), rd(options, 64))) if options else set()
        with _lock:
            for p in e.donated - keep:
                buf = arg_bufs[p] if p < num_args else None
                # The run read a copy; a donated input is consumed as on XLA
                # (unless a numpy view still reads it: then it stays).
                if buf is not None and buf.external_refs == 0:
                    buf.deleted = True
                    buf.array = None
    device = _client().devices[0]
    out_list = rd(rd(a, 56), 0)
    for j, out in enumerate(outs):
        array = np.ascontiguousarray(out)
        if array.dtype != e.out_dtypes[j]:
            array = array.astype(e.out_dtypes[j])
        wr(out_list, 8 * j, Buffer(array.reshape(e.out_dims[j]), device).addr)
    if rd(a, 64):
        wr(rd(a, 64), 0, Event().addr)


def _buffer(a, what) -> Buffer:
    return _get(rd(a, 16), Buffer, what)


@slot
def Buffer_Destroy(a):
    b = _objects.get(rd(a, 16))
    if isinstance(b, Buffer):
        b.release()


@slot
def Buffer_ElementType(a):
    wr_i32(a, 24, _buffer(a, "PJRT_Buffer_ElementType").code)


@slot
def Buffer_Dimensions(a):
    b = _buffer(a, "PJRT_Buffer_Dimensions")
    wr(a, 24, C.addressof(b.dims))
    wr(a, 32, len(b.shape))


IMPL["Buffer_UnpaddedDimensions"] = Buffer_Dimensions


@slot
def Buffer_DynamicDimensionIndices(a):
    wr(a, 24, 0)
    wr(a, 32, 0)


@slot
def Buffer_GetMemoryLayout(a):
    b = _buffer(a, "PJRT_Buffer_GetMemoryLayout")
    layout = a + 24   # PJRT_Buffer_MemoryLayout (80 bytes), dense major-to-minor
    C.memset(layout, 0, 80)
    wr(layout, 0, 80)
    wr(layout + 16, 0, 56)
    wr(layout + 16, 16, C.addressof(b.minor_to_major))
    wr(layout + 16, 24, len(b.shape))
    wr_i32(layout, 72, 0)


@slot
def Buffer_OnDeviceSizeInBytes(a):
    wr(a, 24, _buffer(a, "PJRT_Buffer_OnDeviceSizeInBytes").nbytes)


@slot
def Buffer_Device(a):
    wr(a, 24, _buffer(a, "PJRT_Buffer_Device").device.addr)


@slot
def Buffer_Memory(a):
    wr(a, 24, _buffer(a, "PJRT_Buffer_Memory").device.memory.addr)


@slot
def Buffer_Delete(a):
    b = _buffer(a, "PJRT_Buffer_Delete")
    with _lock:
        b.deleted = True
        if b.external_refs == 0:   # a numpy view still reading it keeps it
            b.array = None


@slot
def Buffer_IsDeleted(a):
    wr_bool(a, 24, _buffer(a, "PJRT_Buffer_IsDeleted").deleted)


@slot
def Buffer_IsOnCpu(a):
    wr_bool(a, 24, True)   # cpu target: buffers are host memory (np.asarray is zero-copy)


@slot
def Buffer_ReadyEvent(a):
    b = _buffer(a, "PJRT_Buffer_ReadyEvent")
    err = Error(A.FAILED_PRECONDITION, "xla_gpu: the buffer was deleted") if b.deleted else None
    wr(a, 24, Event(err).addr)


def _dense_layout(layout: int, ndim: int) -> bool:
    if not layout:
        return True
    if rd_i32(layout, 72) != 0:   # strides layout
        return False
    tiled = layout + 16
    m2m = A.rd_i64s(rd(tiled, 16), rd(tiled, 24))
    return m2m == list(reversed(range(ndim))) and rd(tiled, 48) == 0


@slot
def Buffer_ToHostBuffer(a):
    b = _buffer(a, "PJRT_Buffer_ToHostBuffer")
    array = b.live_array("PJRT_Buffer_ToHostBuffer")
    if not _dense_layout(rd(a, 24), array.ndim):
        raise _PjrtError(A.UNIMPLEMENTED, "xla_gpu: only dense major-to-minor host layouts")
    dst = rd(a, 32)
    if not dst:
        wr(a, 40, array.nbytes)
        return None
    if rd(a, 40) < array.nbytes:
        raise _PjrtError(A.INVALID_ARGUMENT, f"xla_gpu: host buffer of {rd(a, 40)} bytes for a "
                         f"{array.nbytes}-byte array")
    C.memmove(dst, array.ctypes.data, array.nbytes)
    wr(a, 48, Event().addr)


def _copy_to(b: Buffer, device: Device) -> Buffer:
    return Buffer(b.live_array("copy").copy(), device)


@slot
def Buffer_CopyToDevice(a):
    b = _buffer(a, "PJRT_Buffer_CopyToDevice")
    wr(a, 32, _copy_to(b, _get(rd(a, 24), Device, "PJRT_Buffer_CopyToDevice device")).addr)


@slot
def Buffer_CopyToMemory(a):
    b = _buffer(a, "PJRT_Buffer_CopyToMemory")
    wr(a, 32, _copy_to(b, _get(rd(a, 24), Memory, "PJRT_Buffer_CopyToMemory memory").device).addr)


@slot
def Buffer_UnsafePointer(a):
    wr(a, 24, _buffer(a, "PJRT_Buffer_UnsafePointer").live_array("UnsafePointer").ctypes.data)


IMPL["Buffer_OpaqueDeviceMemoryDataPointer"] = Buffer_UnsafePointer


@slot
def Buffer_IncreaseExternalReferenceCount(a):
    b = _buffer(a, "PJRT_Buffer_IncreaseExternalReferenceCount")
    with _lock:
        b.external_refs += 1


@slot
def Buffer_DecreaseExternalReferenceCount(a):
    b = _buffer(a, "PJRT_Buffer_DecreaseExternalReferenceCount")
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
    fn = IMPL.get(name)
    if name.endswith("_Destroy") or name in A.VOID_SLOTS:
        # jaxlib aborts the process when a destroy fails: never report one
        # (a failed destroy only leaks).
        def destroy_call(args):
            for _ in (0, 1):
                try:
                    if finalizing():
                        return None
                    if fn is not None:
                        fn(args)
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
                if fn is None:
                    raise _PjrtError(A.UNIMPLEMENTED,
                                     f"unimplemented: PJRT_{name} is not implemented by xla_gpu")
                return fn(args) or None
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


_TABLE = None


def api_table() -> int:
    """The address of the process-wide PJRT_Api table (built once)."""
    global _TABLE
    with _lock:
        if _TABLE is None:
            table = (A.u64 * (A.API_STRUCT_SIZE // 8))()
            base = C.addressof(table)
            wr(base, 0, A.API_STRUCT_SIZE)
            wr(base, 8, 0)
            wr(base, 16, 24)             # PJRT_Api_Version.struct_size
            wr(base, 24, 0)
            wr_i32(base, 32, A.API_MAJOR)
            wr_i32(base, 36, A.API_MINOR)
            fns = [_make_slot(name) for name in A.SLOTS]
            for i, f in enumerate(fns):
                wr(base, 8 * (5 + i), C.cast(f, C.c_void_p).value)
            _keep.extend(fns)
            _keep.append(table)
            _TABLE = table
        return C.addressof(_TABLE)

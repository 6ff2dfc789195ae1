"""Arrays other libraries hand to a kernel: `__cuda_array_interface__`
(CuPy, Numba, PyTorch, jax) and DLPack (`__dlpack__` / `__dlpack_device__`:
jax, PyTorch, CuPy, numpy), read into one description, `ForeignArray`.

    view = foreign_array(torch_tensor, consumer_stream=0)
    view.pointer, view.shape, view.dtype, view.strides   # bytes, None = C order
    view.stream        # CAI v3: the stream the producer last wrote on
    view.release()     # DLPack: hands the tensor back (calls its deleter)

Driver-free: ctypes and numpy only (a saved kernel runs without a
compiler, and these parsers are tested on machines without a GPU).

Stream protocols:
- CAI v3 `stream`: the consumer must order its work after that stream
  (xla_gpu records an event there and makes its own stream wait on it);
  None means the data is ready. 1 is the legacy default stream, 2 the
  per-thread default stream, 0 is disallowed. `CUDA_ARRAY_INTERFACE_SYNC=0`
  in the environment turns the wait off, as in Numba.
- DLPack: the consumer passes its own stream to `__dlpack__(stream=...)`
  and the producer makes that stream wait (1 = legacy default stream,
  2 = per-thread default, -1 = no synchronization).

A DLPack capsule is consumed as the protocol says: renamed to
`used_dltensor` (`used_dltensor_versioned`) so that its destructor does
nothing, and its deleter is called once, by `release()` or when the
ForeignArray is garbage collected.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ArgumentError

__all__ = ["ForeignArray", "foreign_array", "is_foreign_array", "from_cuda_array_interface",
           "from_dlpack_capsule", "dlpack_dtype", "DLPACK_CPU", "DLPACK_CUDA",
           "DLPACK_CUDA_HOST", "DLPACK_CUDA_MANAGED", "LEGACY_DEFAULT_STREAM",
           "PER_THREAD_DEFAULT_STREAM", "device_name"]

# DLDeviceType values (dlpack.h).
DLPACK_CPU = 1
DLPACK_CUDA = 2
DLPACK_CUDA_HOST = 3
DLPACK_CUDA_MANAGED = 13
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan",
                 8: "Metal", 10: "ROCm", 11: "ROCm host", 13: "CUDA managed", 14: "oneAPI"}

# The stream handles both protocols reserve (also CU_STREAM_LEGACY and
# CU_STREAM_PER_THREAD of the driver API).
LEGACY_DEFAULT_STREAM = 1
PER_THREAD_DEFAULT_STREAM = 2

# DLPACK_FLAG_BITMASK_READ_ONLY / _IS_SUBBYTE_TYPE_PADDED of DLManagedTensorVersioned.
_FLAG_READ_ONLY = 1
_FLAG_SUBBYTE_PADDED = 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _DLTensor)]


# The capsule API, with argument types declared (ctypes.pythonapi's
# defaults would truncate pointers).
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid.restype = ctypes.c_int
_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name.restype = ctypes.c_int

# PyCapsule_SetName keeps the pointer: these bytes live as long as the module.
_LEGACY, _USED_LEGACY = b"dltensor", b"used_dltensor"
_VERSIONED, _USED_VERSIONED = b"dltensor_versioned", b"used_dltensor_versioned"


def dlpack_dtype(code: int, bits: int, lanes: int = 1) -> np.dtype:
    """The numpy (or ml_dtypes) dtype of a DLDataType; ArgumentError for a
    vector, packed sub-byte or unknown type."""
    import ml_dtypes
    if lanes != 1:
        raise ArgumentError(f"DLPack dtype with {lanes} lanes (vector types are not supported)")
    simple = {(0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
              (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
              (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64,
              (4, 16): ml_dtypes.bfloat16, (5, 64): np.complex64, (5, 128): np.complex128,
              (6, 8): np.bool_}
    float8 = {7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz",
              10: "float8_e4m3fn", 11: "float8_e4m3fnuz", 12: "float8_e5m2",
              13: "float8_e5m2fnuz", 14: "float8_e8m0fnu"}
    if (code, bits) in simple:
        return np.dtype(simple[(code, bits)])
    if code in float8 and bits == 8 and hasattr(ml_dtypes, float8[code]):
        return np.dtype(getattr(ml_dtypes, float8[code]))
    if bits < 8:
        raise ArgumentError(f"DLPack dtype code {code} with {bits} bits is packed below a "
                            "byte; xla_gpu kernels take sub-byte types one per byte")
    raise ArgumentError(f"unsupported DLPack dtype (code {code}, {bits} bits)")


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


class _Release:
    """Calls a DLPack deleter exactly once (thread-safe)."""

    def __init__(self, managed: int, deleter: int, capsule: Any):
        self._managed, self._deleter, self._capsule = managed, deleter, capsule
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            managed, deleter = self._managed, self._deleter
            self._managed = self._deleter = 0
            self._capsule = None
        if managed and deleter:
            _DELETER(deleter)(managed)

    @property
    def pending(self) -> bool:
        return bool(self._managed and self._deleter)


@dataclass(eq=False)
class ForeignArray:
    """Another library's array, as a kernel argument sees it."""
    pointer: int                        # address of element 0 (byte offset applied)
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...] | None     # bytes; None: C-contiguous
    device_type: int                    # a DLDeviceType (DLPACK_CUDA, DLPACK_CPU, ...)
    device_id: int = 0
    stream: int | None = None           # CAI v3: wait on it before reading
    read_only: bool = False
    protocol: str = ""                  # "cuda_array_interface" | "dlpack"
    owner: Any = field(default=None, repr=False)   # keeps the producer's memory alive
    _release: _Release | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        if self.strides is None or self.size <= 1:
            return True
        want = _contiguous_strides(self.shape, self.dtype.itemsize)
        # Strides of dimensions of extent 1 do not matter.
        return all(s == w for s, w, d in zip(self.strides, want, self.shape) if d != 1)

    @property
    def on_device(self) -> bool:
        """Device memory a kernel reads directly (CUDA or managed)."""
        return self.device_type in (DLPACK_CUDA, DLPACK_CUDA_MANAGED)

    def misalignment(self, alignment: int) -> int:
        """Bytes past the last `alignment` boundary (0: aligned)."""
        return self.pointer % alignment if self.nbytes else 0

    def release(self) -> None:
        """Hands a DLPack tensor back to its producer (no-op otherwise)."""
        if self._release is not None:
            self._release()

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown: nothing left to tell
            pass


def _has_cuda_array_interface(value: Any) -> bool:
    """Whether reading `__cuda_array_interface__` works: some libraries
    define the property on every array and raise (not AttributeError) for
    host or multi-device ones (jax)."""
    try:
        return isinstance(getattr(value, "__cuda_array_interface__", None), dict)
    except Exception:
        return False


def is_foreign_array(value: Any) -> bool:
    """Whether `value` is a device array by one of the protocols (numpy
    arrays, which also speak DLPack, are host arrays)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return False
    if isinstance(value, ForeignArray) or _has_cuda_array_interface(value):
        return True
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        try:
            device_type = int(value.__dlpack_device__()[0])
        except Exception:
            return False
        return device_type in (DLPACK_CUDA, DLPACK_CUDA_MANAGED)
    return False


def from_cuda_array_interface(obj: Any, where: str = "argument") -> ForeignArray:
    """Reads `obj.__cuda_array_interface__` (versions 0-3)."""
    iface = obj.__cuda_array_interface__
    if not isinstance(iface, dict):
        raise ArgumentError(f"{where}: __cuda_array_interface__ is not a dict")
    try:
        shape = tuple(int(d) for d in iface["shape"])
        dtype = np.dtype(iface["typestr"])
        pointer, read_only = iface["data"]
    except (KeyError, TypeError, ValueError) as e:
        raise ArgumentError(f"{where}: malformed __cuda_array_interface__ ({e})") from None
    if any(d < 0 for d in shape):
        raise ArgumentError(f"{where}: negative extent in shape {list(shape)}")
    if dtype.byteorder == ">":
        raise ArgumentError(f"{where}: big-endian device array ({dtype.str})")
    if iface.get("mask") is not None:
        raise ArgumentError(f"{where}: masked device arrays are not supported")
    strides = iface.get("strides")
    if strides is not None:
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ArgumentError(f"{where}: {len(strides)} strides for {len(shape)} dimensions")
    version = int(iface.get("version", 0))
    stream = iface.get("stream") if version >= 3 else None
    if stream is not None:
        stream = int(stream)
        if stream == 0:
            raise ArgumentError(f"{where}: __cuda_array_interface__ stream 0 is disallowed "
                                "(ambiguous: use 1 for the legacy default stream, 2 for "
                                "the per-thread default stream)")
        if os.environ.get("CUDA_ARRAY_INTERFACE_SYNC", "1") == "0":
            stream = None
    return ForeignArray(int(pointer or 0), shape, dtype, strides, DLPACK_CUDA, 0, stream,
                        bool(read_only), "cuda_array_interface", owner=obj)


def from_dlpack_capsule(capsule: Any, owner: Any = None, where: str = "argument") -> ForeignArray:
    """Consumes a DLPack capsule (`dltensor` or `dltensor_versioned`): the
    tensor's description, with the capsule renamed as used and its deleter
    called by `release()`."""
    if _capsule_is_valid(capsule, _VERSIONED):
        address = _capsule_get_pointer(capsule, _VERSIONED)
        managed = _DLManagedTensorVersioned.from_address(address)
        if managed.version.major != 1:
            # Only the deleter may be touched when the major version differs.
            deleter = managed.deleter
            _capsule_set_name(capsule, _USED_VERSIONED)
            if deleter:
                _DELETER(deleter)(address)
            raise ArgumentError(f"{where}: DLPack major version {managed.version.major} "
                                "(xla_gpu reads version 1)")
        flags, used = int(managed.flags), _USED_VERSIONED
    elif _capsule_is_valid(capsule, _LEGACY):
        address = _capsule_get_pointer(capsule, _LEGACY)
        managed = _DLManagedTensor.from_address(address)
        flags, used = 0, _USED_LEGACY
    else:
        raise ArgumentError(f"{where}: __dlpack__ did not return an unused DLPack capsule")
    # From here on the capsule is ours: its destructor must not free it.
    if _capsule_set_name(capsule, used) != 0:
        raise ArgumentError(f"{where}: could not mark the DLPack capsule as used")
    release = _Release(address, managed.deleter or 0, capsule)
    try:
        tensor = managed.dl_tensor
        ndim = int(tensor.ndim)
        if ndim < 0 or ndim > 64:
            raise ArgumentError(f"{where}: DLPack tensor with {ndim} dimensions")
        if flags & _FLAG_SUBBYTE_PADDED:
            raise ArgumentError(f"{where}: padded sub-byte DLPack tensors are not supported")
        dtype = dlpack_dtype(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
        shape = tuple(int(tensor.shape[i]) for i in range(ndim)) if ndim else ()
        if any(d < 0 for d in shape):
            raise ArgumentError(f"{where}: negative extent in DLPack shape {list(shape)}")
        strides = None
        if ndim and tensor.strides:
            strides = tuple(int(tensor.strides[i]) * dtype.itemsize for i in range(ndim))
        pointer = int(tensor.data or 0) + int(tensor.byte_offset)
        return ForeignArray(pointer, shape, dtype, strides, int(tensor.device.device_type),
                            int(tensor.device.device_id), None, bool(flags & _FLAG_READ_ONLY),
                            "dlpack", owner=owner, _release=release)
    except BaseException:
        release()
        raise


def _dlpack_stream(consumer_stream: int) -> int:
    # The driver's stream 0 is the legacy default stream, which DLPack calls 1.
    return LEGACY_DEFAULT_STREAM if consumer_stream == 0 else consumer_stream


def foreign_array(obj: Any, consumer_stream: int = 0, where: str = "argument") -> ForeignArray:
    """`obj` as a ForeignArray: CAI first (no copy of ownership needed),
    else DLPack, whose producer is told to order its writes before
    `consumer_stream` (a CUstream handle; 0 is the legacy default stream)."""
    if isinstance(obj, ForeignArray):
        return obj
    if _has_cuda_array_interface(obj):
        return from_cuda_array_interface(obj, where)
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise ArgumentError(f"{where}: {type(obj).__name__} is neither a host array nor a "
                            "device array (__cuda_array_interface__ or __dlpack__)")
    device_type, device_id = (int(v) for v in obj.__dlpack_device__())
    stream = _dlpack_stream(consumer_stream) if device_type in (
        DLPACK_CUDA, DLPACK_CUDA_MANAGED) else None
    try:
        capsule = obj.__dlpack__(stream=stream, max_version=(1, 1))
    except TypeError:  # a producer from before DLPack 1.0 (no max_version)
        capsule = obj.__dlpack__(stream=stream)
    view = from_dlpack_capsule(capsule, owner=obj, where=where)
    if (view.device_type, view.device_id) != (device_type, device_id):
        view.release()
        raise ArgumentError(f"{where}: __dlpack_device__ says {(device_type, device_id)}, "
                            f"the tensor says {(view.device_type, view.device_id)}")
    return view


def device_name(device_type: int) -> str:
    return _DEVICE_NAMES.get(device_type, f"device type {device_type}")

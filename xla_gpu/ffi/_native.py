"""Loading libXlaGpuFfi.so (the runtime side of XLA's FFI) through ctypes.

Where the library comes from, first hit wins:
  1. `XLA_GPU_FFI_LIBRARY`: an explicit path (how a machine without a C++
     compiler runs handlers with a library built elsewhere);
  2. the installed one: `xla_gpu/_native/lib/libXlaGpuFfi.so`, built by the
     package's CMake project (the only build recipe: `pip install .`).

It is loaded with RTLD_GLOBAL so that handler libraries that register
themselves when loaded (`XLA_FFI_REGISTER_HANDLER(XLA_FFI_GetApi(), ...)`)
find XLA's API getter in it. numpy-free, mlir-free.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path

from ..errors import XlaGpuError

__all__ = ["lib", "library_path", "BufferDesc", "ERROR_CAPACITY", "FfiUnavailableError"]

LIBRARY_NAME = "libXlaGpuFfi.so"
ERROR_CAPACITY = 8192
_lock = threading.Lock()


class FfiUnavailableError(XlaGpuError, RuntimeError):
    """The FFI runtime library is neither installed nor buildable here."""


class BufferDesc(ctypes.Structure):
    """One argument or result buffer as XlaGpuFfiCall takes it."""
    _fields_ = [("dtype", ctypes.c_int32), ("data", ctypes.c_void_p),
                ("rank", ctypes.c_int64), ("dims", ctypes.POINTER(ctypes.c_int64))]


def _installed() -> Path | None:
    from .._paths import native_dir
    path = native_dir() / "lib" / LIBRARY_NAME
    return path if path.is_file() else None


def library_path() -> Path:
    """The library this process uses."""
    explicit = os.environ.get("XLA_GPU_FFI_LIBRARY")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise FfiUnavailableError(f"XLA_GPU_FFI_LIBRARY={explicit} is not a file")
        return path
    installed = _installed()
    if installed is None:
        raise FfiUnavailableError(
            f"{LIBRARY_NAME} is not installed (reinstall xla_gpu: pip install .); or point "
            "XLA_GPU_FFI_LIBRARY at a built copy")
    return installed


def _declare(handle, name: str, restype, *argtypes) -> None:
    fn = getattr(handle, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


@functools.lru_cache(maxsize=None)
def _load() -> ctypes.CDLL:
    with _lock:
        path = library_path()
        try:
            handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise FfiUnavailableError(f"cannot load {path}: {e}") from e
    P, I32, I64, U32, SZ, C = (ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64,
                               ctypes.c_uint32, ctypes.c_size_t, ctypes.c_char_p)
    VOIDPP = ctypes.POINTER(ctypes.c_void_p)
    _declare(handle, "XlaGpuFfiGetApi", P)
    _declare(handle, "XlaGpuFfiApiVersion", I32)
    _declare(handle, "XlaGpuFfiRegisterHandler", I32, C, C, P, P, P, P, U32, C, SZ)
    _declare(handle, "XlaGpuFfiFindHandler", I32, C, C, VOIDPP, ctypes.POINTER(U32),
             ctypes.POINTER(I32))
    _declare(handle, "XlaGpuFfiUnregisterHandler", I32, C, C)
    _declare(handle, "XlaGpuFfiListHandlers", SZ, C, SZ)
    _declare(handle, "XlaGpuFfiHandlerMetadata", I32, P, ctypes.POINTER(I32),
             ctypes.POINTER(U32), C, SZ)
    _declare(handle, "XlaGpuFfiCheckHandler", I32, P, C, SZ)
    _declare(handle, "XlaGpuFfiRegisterType", I32, C, ctypes.POINTER(I64), P, C, SZ)
    _declare(handle, "XlaGpuFfiFindType", I64, C)
    _declare(handle, "XlaGpuFfiSetUserData", None, I64, P)
    _declare(handle, "XlaGpuFfiInstanceCreate", P, VOIDPP, P, SZ, C, SZ)
    _declare(handle, "XlaGpuFfiInstanceDestroy", None, P)
    _declare(handle, "XlaGpuFfiInstanceHasStage", I32, P, I32)
    _declare(handle, "XlaGpuFfiCall", I32, P, I32, I32, P, I32, I64, I64,
             ctypes.POINTER(BufferDesc), I64, ctypes.POINTER(BufferDesc), C, SZ)
    _declare(handle, "XlaGpuFfiCallLegacy", I32, P, I32, P, P, VOIDPP, C, SZ, C, SZ)
    return handle


def lib() -> ctypes.CDLL:
    """The loaded library (FfiUnavailableError when there is none)."""
    return _load()

"""ctypes access to libXlaGpu.so's C API, and conversions between the
upstream Python bindings' objects and mlir-c handles (through their
`_CAPIPtr` capsules)."""

from __future__ import annotations

import ctypes
import functools

from mlir import ir

from . import library_path


class _Handle(ctypes.Structure):
    """MlirContext, MlirAttribute, MlirAffineMap, ...: one pointer by value."""
    _fields_ = [("ptr", ctypes.c_void_p)]


class _StringRef(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char_p), ("length", ctypes.c_size_t)]


def _python_api(name: str, restype, *argtypes):
    """A private prototype of a Python C API function: `ctypes.pythonapi`'s
    function objects are shared by the whole process, and other libraries
    (jax.ffi.pycapsule) retype them."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


class _CapsuleApi:
    PyCapsule_GetPointer = _python_api("PyCapsule_GetPointer", ctypes.c_void_p,
                                       ctypes.py_object, ctypes.c_char_p)
    PyCapsule_GetName = _python_api("PyCapsule_GetName", ctypes.c_char_p, ctypes.py_object)
    PyCapsule_New = _python_api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p,
                                ctypes.c_char_p, ctypes.c_void_p)


_api = _CapsuleApi

# Capsule names must outlive the capsules: keep the bytes here.
_CAPSULE_NAMES: dict[str, bytes] = {}


def to_handle(obj) -> _Handle:
    capsule = obj._CAPIPtr
    name = _api.PyCapsule_GetName(capsule)
    return _Handle(_api.PyCapsule_GetPointer(capsule, name))


def from_handle(cls, handle: _Handle):
    """Wraps a C handle as `cls` (ir.Attribute, ir.AffineMap, ...)."""
    key = cls.__name__
    if key not in _CAPSULE_NAMES:
        _CAPSULE_NAMES[key] = f"mlir.ir.{key}._CAPIPtr".encode()
    capsule = _api.PyCapsule_New(handle.ptr, _CAPSULE_NAMES[key], None)
    return cls._CAPICreate(capsule)


def _declare(lib, name: str, restype, *argtypes) -> None:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


@functools.cache
def lib() -> ctypes.CDLL:
    """Loads libXlaGpu.so (once) and registers its passes globally."""
    try:
        handle = ctypes.CDLL(library_path())
    except OSError as e:
        raise ImportError(
            f"cannot load the xla_gpu native library {library_path()}: {e}. "
            "Reinstall xla_gpu (pip install .) so that it is built.") from e
    H, I64P = _Handle, ctypes.POINTER(ctypes.c_int64)
    _declare(handle, "xlaGpuRegisterDialect", None, H)
    _declare(handle, "xlaGpuRegisterPasses", None)
    _declare(handle, "xlaGpuAttributeIsAIndexingMap", ctypes.c_bool, H)
    _declare(handle, "xlaGpuIndexingMapAttrGet", H, H, H,
             ctypes.POINTER(_StringRef), I64P, ctypes.POINTER(_StringRef), I64P,
             ctypes.c_ssize_t, ctypes.POINTER(H), I64P, ctypes.c_char_p,
             ctypes.c_size_t)
    _declare(handle, "xlaGpuIndexingMapAttrGetAffineMap", H, H)
    _declare(handle, "xlaGpuIndexingMapAttrGetDimName", _StringRef, H,
             ctypes.c_ssize_t)
    _declare(handle, "xlaGpuIndexingMapAttrGetSymbolName", _StringRef, H,
             ctypes.c_ssize_t)
    _declare(handle, "xlaGpuIndexingMapAttrGetDimBounds", None, H,
             ctypes.c_ssize_t, I64P, I64P)
    _declare(handle, "xlaGpuIndexingMapAttrGetSymbolBounds", None, H,
             ctypes.c_ssize_t, I64P, I64P)
    _declare(handle, "xlaGpuIndexingMapAttrGetNumConstraints", ctypes.c_ssize_t, H)
    _declare(handle, "xlaGpuIndexingMapAttrGetConstraint", H, H,
             ctypes.c_ssize_t, I64P, I64P)
    _declare(handle, "xlaGpuIndexingMapAttrIsKnownEmpty", ctypes.c_bool, H)
    _declare(handle, "xlaGpuIndexingMapAttrSimplify", H, H)
    _declare(handle, "xlaGpuIndexingMapAttrCompose", H, H, H)
    _declare(handle, "xlaGpuIndexingMapAttrRemoveUnusedSymbols", H, H)
    _declare(handle, "xlaGpuIndexingMapAttrEvaluateRange", None, H, H, I64P, I64P)
    _declare(handle, "xlaGpuIndexingMapAttrGetLinearization", H, H,
             ctypes.c_ssize_t, I64P)
    handle.xlaGpuRegisterPasses()
    return handle


def string_ref(text: str) -> _StringRef:
    data = text.encode()
    return _StringRef(data, len(data))


__all__ = ["lib", "to_handle", "from_handle", "string_ref"]

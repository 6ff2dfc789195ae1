"""ctypes access to libXlaGpu.so's C API, and conversions between the
upstream Python bindings' objects and mlir-c handles (through their
`_CAPIPtr` capsules)."""

from __future__ import annotations

import ctypes
import functools

from mlir import ir

from ._paths import library_path


class _Handle(ctypes.Structure):
    """MlirContext, MlirAttribute, MlirAffineMap, ...: one pointer by value."""
    _fields_ = [("ptr", ctypes.c_void_p)]


class _StringRef(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char_p), ("length", ctypes.c_size_t)]


# MlirStringCallback: (MlirStringRef, void *userData).
STRING_CALLBACK = ctypes.CFUNCTYPE(None, _StringRef, ctypes.c_void_p)


def string_ref_bytes(ref: _StringRef) -> bytes:
    """The bytes an MlirStringRef points to, NULs included (its `data`
    field reads as a C string, which stops at the first NUL)."""
    address = ctypes.c_void_p.from_address(ctypes.addressof(ref)).value
    return ctypes.string_at(address, ref.length) if ref.length else b""


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


# The C API exactly as dialect/CAPI.h declares it: function -> (result type,
# parameter types), in C. The ctypes prototypes are derived from it, and
# tests/python/package/test_native_abi.py compiles these signatures against the
# installed header, so the two cannot drift apart.
C_SIGNATURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "xlaGpuRegisterDialect": ("void", ("MlirDialectRegistry",)),
    "xlaGpuRegisterPasses": ("void", ()),
    "xlaGpuAttributeIsAIndexingMap": ("bool", ("MlirAttribute",)),
    "xlaGpuIndexingMapAttrGet": ("MlirAttribute", (
        "MlirContext", "MlirAffineMap", "const MlirStringRef *", "const int64_t *",
        "const MlirStringRef *", "const int64_t *", "intptr_t", "const MlirAffineExpr *",
        "const int64_t *", "char *", "size_t")),
    "xlaGpuIndexingMapAttrGetAffineMap": ("MlirAffineMap", ("MlirAttribute",)),
    "xlaGpuIndexingMapAttrGetDimName": ("MlirStringRef", ("MlirAttribute", "intptr_t")),
    "xlaGpuIndexingMapAttrGetSymbolName": ("MlirStringRef", ("MlirAttribute", "intptr_t")),
    "xlaGpuIndexingMapAttrGetDimBounds": ("void", ("MlirAttribute", "intptr_t", "int64_t *",
                                                   "int64_t *")),
    "xlaGpuIndexingMapAttrGetSymbolBounds": ("void", ("MlirAttribute", "intptr_t",
                                                      "int64_t *", "int64_t *")),
    "xlaGpuIndexingMapAttrGetNumConstraints": ("intptr_t", ("MlirAttribute",)),
    "xlaGpuIndexingMapAttrGetConstraint": ("MlirAffineExpr", ("MlirAttribute", "intptr_t",
                                                              "int64_t *", "int64_t *")),
    "xlaGpuIndexingMapAttrIsKnownEmpty": ("bool", ("MlirAttribute",)),
    "xlaGpuIndexingMapAttrSimplify": ("MlirAttribute", ("MlirAttribute",)),
    "xlaGpuIndexingMapAttrCompose": ("MlirAttribute", ("MlirAttribute", "MlirAttribute")),
    "xlaGpuIndexingMapAttrRemoveUnusedSymbols": ("MlirAttribute", ("MlirAttribute",)),
    "xlaGpuIndexingMapAttrEvaluateRange": ("void", ("MlirAttribute", "MlirAffineExpr",
                                                    "int64_t *", "int64_t *")),
    "xlaGpuIndexingMapAttrGetLinearization": ("MlirAttribute", ("MlirContext", "intptr_t",
                                                                "const int64_t *")),
    "xlaGpuSerializeToPtx": ("bool", ("MlirOperation", "const void *", "size_t",
                                      "MlirStringCallback", "void *")),
}

_HANDLE_TYPES = ("MlirContext", "MlirDialectRegistry", "MlirAttribute", "MlirAffineMap",
                 "MlirAffineExpr", "MlirOperation")
_CTYPES = {
    "void": None, "bool": ctypes.c_bool, "intptr_t": ctypes.c_ssize_t,
    "size_t": ctypes.c_size_t, "char *": ctypes.c_char_p,
    "int64_t *": ctypes.POINTER(ctypes.c_int64),
    "const int64_t *": ctypes.POINTER(ctypes.c_int64),
    "MlirStringRef": _StringRef, "const MlirStringRef *": ctypes.POINTER(_StringRef),
    "const MlirAffineExpr *": ctypes.POINTER(_Handle),
    "const void *": ctypes.c_void_p, "void *": ctypes.c_void_p,
    "MlirStringCallback": STRING_CALLBACK,
    **{name: _Handle for name in _HANDLE_TYPES},
}


@functools.cache
def lib() -> ctypes.CDLL:
    """Loads libXlaGpu.so (once) and registers its passes globally."""
    try:
        handle = ctypes.CDLL(library_path())
    except OSError as e:
        raise ImportError(
            f"cannot load the xla_gpu native library {library_path()}: {e}. "
            "Reinstall xla_gpu (pip install .) so that it is built.") from e
    for name, (result, params) in C_SIGNATURES.items():
        fn = getattr(handle, name)
        fn.restype = _CTYPES[result]
        fn.argtypes = [_CTYPES[p] for p in params]
    handle.xlaGpuRegisterPasses()
    return handle


def string_ref(text: str) -> _StringRef:
    data = text.encode()
    return _StringRef(data, len(data))


__all__ = ["lib", "to_handle", "from_handle", "string_ref", "string_ref_bytes",
           "C_SIGNATURES", "STRING_CALLBACK"]

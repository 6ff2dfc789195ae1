"""Running a pass pipeline through MLIR's C API with ctypes, which lets
go of the GIL while the passes run (the bindings' `PassManager.run` holds
it): the kernels of a whole program are compiled on several host threads,
and their pipelines then run side by side.

The pass manager is the bindings' own library's (libMLIRPythonCAPI.so:
the same registry of dialects and passes, the same contexts), parsed once
per context and pipeline. Errors come back as `mlir.ir.MLIRError` with
each error diagnostic's location and message, like the bindings' (a
diagnostic handler collects them during the run).

MLIR's pass manager verifies the IR after every pass; on a kernel's ~35
passes that is a quarter of the pipeline's time (measured: reduce_row
20 -> 15 ms). The input is verified before it gets here (the emitters'
modules by the compiler, parsed text by the parser), so the result is
verified once, after the last pass, unless `XLA_GPU_VERIFY_EACH_PASS=1`
(the test suites set it: an invalid IR then names the pass that made it).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

from mlir import ir as _ir

from ._native import STRING_CALLBACK, _Handle, _StringRef, string_ref_bytes, to_handle

__all__ = ["available", "bindings_library", "run_pipeline", "error_diagnostics",
           "mlir_error"]


class _LogicalResult(ctypes.Structure):
    _fields_ = [("value", ctypes.c_int8)]


# MlirLogicalResult is a struct of one int8, returned as that int8 (ctypes
# callbacks cannot return structures).
_DIAGNOSTIC_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int8, _Handle, ctypes.c_void_p)
_ERROR_SEVERITY = 0   # MlirDiagnosticError
_KEEP_PASS_MANAGERS = 32   # per thread


def verify_each_pass() -> bool:
    """Whether the pass managers verify the IR after every pass (else once,
    after the pipeline)."""
    return os.environ.get("XLA_GPU_VERIFY_EACH_PASS", "") not in ("", "0")


@functools.lru_cache(maxsize=None)
def bindings_library() -> ctypes.CDLL | None:
    """The MLIR bindings' own library (libMLIRPythonCAPI.so: the MLIR and
    LLVM their contexts run in); None when it is not where they keep it."""
    path = Path(_ir.__file__).resolve().parent / "_mlir_libs" / "libMLIRPythonCAPI.so"
    try:
        return ctypes.CDLL(str(path))
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def _capi():
    """The bindings' library with the prototypes used here; None when it
    is missing or lacks one of them."""
    lib = bindings_library()
    if lib is None:
        return None
    try:
        prototypes = {
            "mlirPassManagerCreate": (_Handle, [_Handle]),
            "mlirPassManagerDestroy": (None, [_Handle]),
            "mlirPassManagerGetAsOpPassManager": (_Handle, [_Handle]),
            "mlirParsePassPipeline": (_LogicalResult, [_Handle, _StringRef, STRING_CALLBACK,
                                                       ctypes.c_void_p]),
            "mlirPassManagerRunOnOp": (_LogicalResult, [_Handle, _Handle]),
            "mlirPassManagerEnableVerifier": (None, [_Handle, ctypes.c_bool]),
            "mlirOperationVerify": (ctypes.c_bool, [_Handle]),
            "mlirContextAttachDiagnosticHandler": (ctypes.c_uint64, [
                _Handle, _DIAGNOSTIC_HANDLER, ctypes.c_void_p, ctypes.c_void_p]),
            "mlirContextDetachDiagnosticHandler": (None, [_Handle, ctypes.c_uint64]),
            "mlirDiagnosticGetSeverity": (ctypes.c_int, [_Handle]),
            "mlirDiagnosticGetLocation": (_Handle, [_Handle]),
            "mlirDiagnosticPrint": (None, [_Handle, STRING_CALLBACK, ctypes.c_void_p]),
            "mlirLocationPrint": (None, [_Handle, STRING_CALLBACK, ctypes.c_void_p]),
        }
        for name, (restype, argtypes) in prototypes.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        return lib
    except AttributeError:
        return None


def available() -> bool:
    return _capi() is not None


def _printed(print_fn, handle) -> str:
    parts: list[bytes] = []
    callback = STRING_CALLBACK(lambda ref, _: parts.append(string_ref_bytes(ref)))
    print_fn(handle, callback, None)
    return b"".join(parts).decode(errors="replace")


class _PassManagers(threading.local):
    """This thread's parsed pass managers, by (context, pipeline); a
    context is used by one thread (xla_gpu.compiler keeps one per thread)."""

    def __init__(self):
        self.by_key: dict[tuple[int, str, bool], tuple[object, _Handle]] = {}


_managers = _PassManagers()


def _pass_manager(context: _ir.Context, pipeline: str, verify: bool) -> _Handle:
    key = (id(context), pipeline, verify)
    held = _managers.by_key.get(key)
    if held is not None and held[0] is context:
        return held[1]
    lib = _capi()
    pm = lib.mlirPassManagerCreate(to_handle(context))
    text = pipeline.encode()
    errors: list[bytes] = []
    callback = STRING_CALLBACK(lambda ref, _: errors.append(string_ref_bytes(ref)))
    result = lib.mlirParsePassPipeline(lib.mlirPassManagerGetAsOpPassManager(pm),
                                       _StringRef(text, len(text)), callback, None)
    if not result.value:
        lib.mlirPassManagerDestroy(pm)
        raise ValueError(f"invalid pass pipeline {pipeline!r}: "
                         f"{b''.join(errors).decode(errors='replace')}")
    lib.mlirPassManagerEnableVerifier(pm, verify)
    # Keeps the context alive as long as its pass manager (a destroyed
    # context would leave the manager dangling); the cpu target's
    # pipelines differ by launch dimensions, so only the latest are kept.
    if len(_managers.by_key) >= _KEEP_PASS_MANAGERS:
        oldest = next(iter(_managers.by_key))
        lib.mlirPassManagerDestroy(_managers.by_key.pop(oldest)[1])
    _managers.by_key[key] = (context, pm)
    return pm


def run_pipeline(module: _ir.Module, pipeline: str, *, verify: bool = True) -> None:
    """Runs `pipeline` (a `builtin.module(...)` string) on `module` in
    place without the GIL; raises mlir.ir.MLIRError with the error
    diagnostics when it fails. `verify=False`: the result is not verified
    (unless after every pass), for a pipeline run in parts whose last part
    verifies."""
    lib = _capi()
    each_pass = verify_each_pass()
    pm = _pass_manager(module.context, pipeline, each_pass)
    with error_diagnostics(module.context) as diagnostics:
        passed = lib.mlirPassManagerRunOnOp(pm, to_handle(module.operation)).value
        # Without per-pass verification, the result is verified here once.
        valid = not passed or each_pass or not verify or \
            lib.mlirOperationVerify(to_handle(module.operation))
    if not passed:
        raise mlir_error("Failure while executing pass pipeline", diagnostics)
    if not valid:
        raise mlir_error("The pass pipeline produced invalid IR "
                               "(XLA_GPU_VERIFY_EACH_PASS=1 names the pass)", diagnostics)


@contextlib.contextmanager
def error_diagnostics(context: _ir.Context) -> Iterator[list[SimpleNamespace]]:
    """Collects the error diagnostics `context` reports inside the block
    (location, message), as the bindings' MLIRError holds them; they are
    not printed."""
    lib = _capi()
    diagnostics: list[SimpleNamespace] = []

    def handle(diagnostic, _):
        # Called (with the GIL) only when something is reported.
        if lib.mlirDiagnosticGetSeverity(diagnostic) == _ERROR_SEVERITY:
            location = _printed(lib.mlirLocationPrint, lib.mlirDiagnosticGetLocation(diagnostic))
            diagnostics.append(SimpleNamespace(
                location=location, message=_printed(lib.mlirDiagnosticPrint, diagnostic),
                notes=[]))
        return 1   # handled: not printed

    handler = _DIAGNOSTIC_HANDLER(handle)
    context_handle = to_handle(context)
    handler_id = lib.mlirContextAttachDiagnosticHandler(context_handle, handler, None, None)
    try:
        yield diagnostics
    finally:
        lib.mlirContextDetachDiagnosticHandler(context_handle, handler_id)


def mlir_error(message: str, diagnostics: list[SimpleNamespace]) -> _ir.MLIRError:
    """mlir.ir.MLIRError: `message`, then each diagnostic."""
    if diagnostics:
        message += ":\n" + "\n".join(f"error: {d.location}: {d.message}" for d in diagnostics)
    return _ir.MLIRError(message, diagnostics)

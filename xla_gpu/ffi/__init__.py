"""Custom calls through XLA's FFI: handlers written for XLA / JAX run in
xla_gpu unchanged, and plain Python functions can be handlers too.

    import ctypes, xla_gpu.ffi as ffi
    lib = ctypes.cdll.LoadLibrary("libhandlers.so")      # built against
    ffi.register_ffi_target("my_op", ffi.pycapsule(lib.MyOp),   # jaxlib's
                            platform="cpu")                      # ffi.h
    xla_gpu.compile(hlo_text, target="cpu").run(x, y)    # custom-call
    xla_gpu.hlo.evaluate(module, x, y)                   # "my_op" runs it

An HLO `custom-call` is bound to the handler registered under its target
name for the platform it runs on ("cpu": host pointers; "cuda": device
pointers and the CUstream) when its program is compiled (`xla_gpu.compile`)
or loaded (`xla_gpu.runtime.load`, `load_program`): a compiled program keeps
that handler whatever is registered or unregistered afterwards, and a
custom call with no handler then fails when it runs, naming the target.
The reference interpreter (`xla_gpu.hlo.evaluate`) looks handlers up when
it evaluates the call, in `xla_gpu.ffi.registry`: the Python handlers of
custom calls (`registry.register_custom_call`, also reachable as
`xla_gpu.hlo.interpreter.register_custom_call`), where a cpu handler
registered here is entered too.
The runtime side of XLA's C API (the function table a handler calls, the
call frame it receives) is libXlaGpuFfi.so (`ffi/` in the source tree);
this package registers handlers, builds the attributes from the custom
call's `backend_config`, and calls a handler's stages:

* instantiate (once per custom-call instruction, no buffers, no stream),
  then prepare and initialize (once, before the first execution, with its
  buffers), then execute (every execution). State a stage sets lives as
  long as the compiled program (the interpreter: the parsed module).
* Arguments and results are the operands' and result's arrays, tuples
  flattened depth first; result buffers may be used as scratch.
* An asynchronous handler (one that returns a future) is waited for.

What a handler can be (`register_ffi_target(name, target, platform)`):

* a PyCapsule around an `XLA_FFI_Handler*` (`jax.ffi.pycapsule(fn)` or
  `xla_gpu.ffi.pycapsule(fn)`), or the ctypes function itself;
* a dict of such handlers by stage: {"instantiate", "prepare",
  "initialize", "execute"} ("execute" required);
* a Python callable. cpu: `fn(*operands, *results, **attributes)` with
  numpy arrays (operands read-only; results writable, to fill in place;
  it returns None), or `fn(*operands, **attributes)` returning the
  result(s) — whichever its signature takes. A returned value must be one
  array per result (a tuple or list of them for several), of the result's
  shape, and of its dtype or one numpy converts to it without loss
  (Python numbers take the result's dtype); anything else (None, the wrong
  count, shape or dtype) is an FfiError naming the target. cuda: the same
  with device arrays (`__cuda_array_interface__`) and `stream=` (a
  CUstream handle) among the keyword arguments.

Registering never calls the handler: its traits are the `traits`
argument, and the FFI API version it was built against (which XLA asks
the handler for when registering) is asked for right before its first
call, so that a wrong capsule (a function that is no handler) cannot
crash the registration. A handler built for an unsupported API version is
refused then, as an FfiError.

Errors: a handler's error is an `FfiError` carrying its code, message,
target and instruction; a registration XLA would refuse (unknown
platform, no execute stage, a different handler under a taken name) and
bad arguments to any function here are `FfiRegistrationError`s (a
ValueError); a custom call with no handler fails as a thunk error
(runtime) or HloError (interpreter) naming the target.
numpy + ctypes (+ cuda-python on cuda) only: never mlir.
"""

from __future__ import annotations

from typing import Any, Callable

from . import _native  # noqa: F401  (xla_gpu.ffi._native: the library's loader)
from ._native import FfiUnavailableError
from .base import (ERROR_CODES, STAGES, TYPED_FFI, CHandler, FfiError,  # noqa: F401
                   FfiRegistrationError, LegacyHandler, PythonHandler, canonical_platform)
from .targets import (load_library, lookup, pycapsule, register_ffi_target,  # noqa: F401
                      register_ffi_type, register_from_spec, registered_targets,
                      set_user_data, type_id, unregister_ffi_target)
# The registrations runtime_handler resolves (the tables are never rebound).
from .targets import (_find_c_handler, _legacy_handlers, _lock, _python_handlers,
                      _target_name)

__all__ = ["register_ffi_target", "register_ffi_type", "unregister_ffi_target",
           "pycapsule", "registered_targets", "runtime_handler", "load_library",
           "set_user_data", "type_id", "register_from_spec", "FfiError",
           "FfiRegistrationError",
           "FfiUnavailableError", "canonical_platform", "ERROR_CODES", "STAGES"]


# --- the runtime's hook ---------------------------------------------------------------


def runtime_handler(target: str, platform: str) -> Callable[[Any, Any], None] | None:
    """The thunk runtime's hook (`xla_gpu.runtime.custom_calls.lookup`):
    `handler(ctx, thunk)` running the handler registered for `target` on
    `platform` now, or None when there is none. The registrations are
    resolved here, once: a program asks when it is compiled or loaded and
    keeps the handler, so that unregistering the target or registering it
    again later does not change what the program calls."""
    try:
        _target_name(target, "FFI lookup")
        platform = canonical_platform(platform)
    except FfiRegistrationError:
        return None
    with _lock:
        python = _python_handlers.get((target, platform))
        typed = legacy = None
        if python is None:
            typed = _find_c_handler(target, platform)
            legacy = _legacy_handlers.get((target, platform))
    if python is None and typed is None and legacy is None:
        from .jaxlib_targets import provide   # jax's own cpu targets, from jaxlib
        return runtime_handler(target, platform) if provide(target, platform) else None
    # The same registrations give the same dispatcher (cheap repeated lookups).
    registrations = (python, typed, legacy)
    cached = _dispatchers.get((target, platform))
    if cached is not None and all(a is b for a, b in zip(cached[0], registrations)):
        return cached[1]
    from . import calls
    dispatcher = calls.thunk_dispatcher(target, platform, *registrations)
    _dispatchers[(target, platform)] = (registrations, dispatcher)
    return dispatcher


_dispatchers: dict[tuple[str, str], tuple[tuple, Callable[[Any, Any], None]]] = {}

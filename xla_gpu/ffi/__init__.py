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

import ctypes
import numbers
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import XlaGpuError
from . import _native
from ._native import FfiUnavailableError

__all__ = ["register_ffi_target", "register_ffi_type", "unregister_ffi_target",
           "pycapsule", "registered_targets", "runtime_handler", "load_library",
           "set_user_data", "type_id", "register_from_spec", "FfiError",
           "FfiRegistrationError",
           "FfiUnavailableError", "canonical_platform", "ERROR_CODES", "STAGES"]


class FfiError(XlaGpuError, RuntimeError):
    """An FFI handler returned an error (or its binding refused the call:
    wrong element type, rank or number of buffers or attributes)."""

    def __init__(self, message: str, code: str = "UNKNOWN", target: str = "",
                 stage: str = "execute", handler_message: str = ""):
        super().__init__(message)
        self.code, self.target, self.stage = code, target, stage
        self.handler_message = handler_message


class FfiRegistrationError(XlaGpuError, ValueError):
    """A registration XLA's FFI refuses (the message says why)."""


ERROR_CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
               "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
               "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
               "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
STAGES = ("instantiate", "prepare", "initialize", "execute")

_PLATFORMS = {"cpu": "cpu", "host": "cpu", "cuda": "cuda", "gpu": "cuda"}


def canonical_platform(platform: str) -> str:
    """"cpu" or "cuda" for the names jax and XLA use ("Host", "CUDA", "gpu")."""
    key = str(platform).lower()
    if key not in _PLATFORMS:
        raise FfiRegistrationError(
            f"unknown platform {platform!r}: xla_gpu runs custom calls on 'cpu' "
            "(also 'Host') and 'cuda' (also 'CUDA', 'gpu')")
    return _PLATFORMS[key]


# --- registrations ------------------------------------------------------------


@dataclass(frozen=True)
class CHandler:
    """A handler bundle in libXlaGpuFfi.so's registry: stage addresses (0:
    none), traits and the FFI API version the handler was built against."""
    name: str
    platform: str
    bundle: tuple[int, int, int, int]
    traits: int
    api_version: tuple[int, int]


@dataclass(frozen=True)
class LegacyHandler:
    """A function of XLA's legacy custom-call ABI (api_version=0): cpu
    `void(void* out, const void** in[, ...status])`, cuda `void(CUstream,
    void** buffers, const char* opaque, size_t len[, status])`."""
    name: str
    platform: str
    address: int


@dataclass(frozen=True)
class PythonHandler:
    """A Python callable registered as a handler."""
    name: str
    platform: str
    fn: Callable[..., Any]


_lock = threading.Lock()
_python_handlers: dict[tuple[str, str], PythonHandler] = {}
_legacy_handlers: dict[tuple[str, str], LegacyHandler] = {}
_native_in_use = False   # set once libXlaGpuFfi.so is loaded for a handler


def _target_name(name: Any, what: str) -> bytes:
    """A target or type name as the native registries take it (UTF-8
    without NUL: C would cut the name at a NUL and file it under a
    different one)."""
    if not isinstance(name, str) or not name:
        raise FfiRegistrationError(f"{what}: expected a non-empty str name, got {name!r}")
    if "\0" in name:
        raise FfiRegistrationError(f"{what}: the name {name!r} contains a NUL character")
    try:
        return name.encode()
    except UnicodeEncodeError:
        raise FfiRegistrationError(f"{what}: the name {name!r} is not valid Unicode "
                                   "text (lone surrogates)") from None


def _integer(value: Any, what: str, low: int, high: int) -> int:
    """`value` as an int in [low, high); bools and non-integers refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise FfiRegistrationError(f"{what}: expected an int, got {type(value).__name__} "
                                   f"{value!r}")
    value = int(value)
    if not low <= value < high:
        raise FfiRegistrationError(f"{what}: {value} is out of range [{low}, {high})")
    return value


def _capsule_pointer(capsule: Any, what: str) -> int:
    if not _is_capsule(capsule):
        raise FfiRegistrationError(f"{what}: expected a PyCapsule (xla_gpu.ffi.pycapsule / "
                                   f"jax.ffi.pycapsule), got {type(capsule).__name__}")
    api = ctypes.pythonapi
    api.PyCapsule_IsValid.restype = ctypes.c_int
    api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    name = api.PyCapsule_GetName(capsule)
    if not api.PyCapsule_IsValid(capsule, name):
        raise FfiRegistrationError(f"{what}: not a valid PyCapsule")
    pointer = api.PyCapsule_GetPointer(capsule, name)
    if not pointer:
        raise FfiRegistrationError(f"{what}: the PyCapsule holds a null pointer")
    return int(pointer)


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _handler_address(obj: Any, what: str) -> int:
    """The XLA_FFI_Handler* of a capsule, a ctypes function or an address."""
    if _is_capsule(obj):
        return _capsule_pointer(obj, what)
    if isinstance(obj, ctypes._CFuncPtr):   # lib.MyHandler
        address = ctypes.cast(obj, ctypes.c_void_p).value
        if not address:
            raise FfiRegistrationError(f"{what}: a null function pointer")
        return int(address)
    if isinstance(obj, ctypes.c_void_p):
        if not obj.value:
            raise FfiRegistrationError(f"{what}: a null function pointer")
        return int(obj.value)
    raise FfiRegistrationError(
        f"{what}: expected a PyCapsule (jax.ffi.pycapsule / xla_gpu.ffi.pycapsule) "
        f"around an XLA_FFI_Handler*, got {type(obj).__name__}")


def _mapping_permissions(address: int, size: int = 1) -> str | None:
    """The permissions ("r-xp", "rw-p", ...) of the mapping of this process
    that holds [address, address + size); "" when none does; None where
    /proc/self/maps cannot tell. A capsule of data registered as a handler
    would otherwise be called as code, a handler's address written to as a
    type id: wrong registrations are refused instead of crashing."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                span, perms = line.split(None, 2)[:2]
                lo, hi = (int(x, 16) for x in span.split("-"))
                if lo <= address and address + size <= hi:
                    return perms
    except (OSError, ValueError):
        return None
    return ""


def _check_code(address: int, what: str) -> int:
    perms = _mapping_permissions(address)
    if perms is not None and "x" not in perms:
        raise FfiRegistrationError(f"{what}: 0x{address:x} is not code (not in an "
                                   "executable mapping): pass the handler function, e.g. "
                                   "pycapsule(lib.MyHandler)")
    return address


def _check_data(address: int, size: int, writable: bool, what: str) -> int:
    perms = _mapping_permissions(address, size)
    if perms is not None and ("r" not in perms or (writable and "w" not in perms)):
        raise FfiRegistrationError(f"{what}: 0x{address:x} is not {'writable ' if writable else ''}"
                                   f"data (a function's address?): pass the object, e.g. "
                                   "pycapsule(lib.MyTypeId())")
    return address


def _pointer_value(obj: Any, what: str) -> int:
    """The address a ctypes function, ctypes pointer or int holds (0: null)."""
    if isinstance(obj, numbers.Integral) and not isinstance(obj, bool):
        return _integer(obj, what, 0, 1 << 64)
    if isinstance(obj, (ctypes._CFuncPtr, ctypes._Pointer, ctypes.c_void_p)):
        return int(ctypes.cast(obj, ctypes.c_void_p).value or 0)
    raise FfiRegistrationError(f"{what}: expected a ctypes function (lib.MyHandler), a ctypes "
                               f"pointer or an int address, got {type(obj).__name__} {obj!r}")


def pycapsule(funcptr: Any) -> Any:
    """Wraps a ctypes function pointer (`lib.MyHandler`) in a PyCapsule, as
    `jax.ffi.pycapsule` does: the form `register_ffi_target` takes. An
    address (int or c_void_p, e.g. what a library's type-id getter
    returns) is wrapped the same way, for `register_ffi_type`. Nothing is
    called or read at the address."""
    address = _pointer_value(funcptr, "pycapsule")
    if not address:
        raise FfiRegistrationError("pycapsule: a null function pointer")
    builder = ctypes.pythonapi.PyCapsule_New
    builder.restype = ctypes.py_object
    builder.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return builder(address, None, None)


def _error_buffer():
    return ctypes.create_string_buffer(_native.ERROR_CAPACITY)


def _lib():
    global _native_in_use
    handle = _native.lib()
    _native_in_use = True
    return handle


def load_library(path: str) -> ctypes.CDLL:
    """Loads a handler library after the FFI runtime, so that handlers it
    registers when loaded (`XLA_FFI_REGISTER_HANDLER(XLA_FFI_GetApi(),
    ...)`, `XLA_FFI_REGISTER_TYPE`) land in xla_gpu's registries (and its
    cpu handlers in the interpreter's), and the legacy status functions it
    links against resolve. FfiRegistrationError when it cannot be loaded."""
    try:
        filename = os.fsdecode(os.fspath(path))
    except TypeError:
        raise FfiRegistrationError(f"load_library: expected a path, got "
                                   f"{type(path).__name__} {path!r}") from None
    if not filename or "\0" in filename:
        raise FfiRegistrationError(f"load_library: {path!r} is not a file name")
    _lib()
    before = set(registered_targets("cpu"))
    try:
        library = ctypes.CDLL(filename)
    except OSError as e:
        raise FfiRegistrationError(f"load_library: cannot load {filename}: {e}") from None
    from . import calls
    for name, _ in sorted(set(registered_targets("cpu")) - before):
        calls.bridge_into_interpreter(name)
    return library


# Found C registrations, by (name, platform). A registration never changes
# while it exists (a different handler under a taken name is refused), so
# hits stay valid until unregister_ffi_target drops them; misses are not
# cached (a library loaded later may register the name itself).
_c_handler_cache: dict[tuple[str, str], CHandler] = {}


def _find_c_handler(name: str, platform: str) -> CHandler | None:
    if not _native_in_use:
        return None
    cached = _c_handler_cache.get((name, platform))
    if cached is not None:
        return cached
    bundle = (ctypes.c_void_p * 4)()
    traits = ctypes.c_uint32()
    version = (ctypes.c_int32 * 2)()
    if not _native.lib().XlaGpuFfiFindHandler(name.encode(), platform.encode(), bundle,
                                              ctypes.byref(traits), version):
        return None
    found = CHandler(name, platform, tuple(int(b or 0) for b in bundle), int(traits.value),
                     (int(version[0]), int(version[1])))
    _c_handler_cache[(name, platform)] = found
    return found


def register_ffi_target(name: str, fn: Any, platform: str = "cpu", api_version: int = 1,
                        traits: int = 0) -> None:
    """Registers the handler of custom-call target `name` on `platform`,
    taking what `jax.ffi.register_ffi_target` takes: a PyCapsule around an
    `XLA_FFI_Handler*`, a dict of them by stage ("execute" required), or
    here also a Python callable (see the module docstring). `api_version`
    1 is XLA's typed FFI; 0 registers a function of XLA's legacy
    custom-call ABI (a PyCapsule or ctypes function; custom calls with
    api_version API_VERSION_ORIGINAL / STATUS_RETURNING[_UNIFIED] bind to
    it, typed-FFI ones to a typed handler: two registries, as in XLA; a
    Python callable serves both). `traits` are XLA_FFI_Handler_Traits bits.
    Registering the same handler twice is harmless; a different one under a
    taken name is an error, as in XLA. Registering never calls the handler
    (XLA does, to ask for its traits and API version): `traits` are taken
    as given, and the API version is checked right before the first call. A cpu registration also makes the
    target evaluable by the reference interpreter (`xla_gpu.hlo.evaluate`,
    `xla-gpu-run`)."""
    encoded = _target_name(name, "register_ffi_target")
    where = f"FFI target '{name}' on platform {platform!r}"
    platform = canonical_platform(platform)
    if isinstance(api_version, bool) or not isinstance(api_version, numbers.Integral) or \
            api_version not in (0, 1):
        raise FfiRegistrationError(
            f"{where}: api_version must be 1 (XLA's typed FFI) or 0 (the legacy "
            f"custom-call ABI), got {api_version!r}")
    api_version = int(api_version)
    # XLA_FFI_Handler_Traits is a uint32 bit set.
    traits = _integer(traits, f"{where}: traits", 0, 1 << 32)
    key = (name, platform)
    is_c_function = _is_capsule(fn) or isinstance(fn, (ctypes._CFuncPtr, ctypes.c_void_p))
    if api_version == 0 and (is_c_function or not callable(fn)):
        if isinstance(fn, dict):
            raise FfiRegistrationError(f"{where}: a legacy (api_version=0) handler is "
                                       "one function, not a dict of stages")
        address = _check_code(_handler_address(fn, where), where)
        with _lock:
            if key in _python_handlers:
                raise FfiRegistrationError(f"Duplicate FFI handler registration for "
                                           f"{where}: a Python handler is registered")
            old = _legacy_handlers.get(key)
            if old is not None and old.address != address:
                raise FfiRegistrationError(f"Duplicate custom-call target registration "
                                           f"for {where} with a different function")
            _lib()   # handler libraries may link XlaCustomCallStatusSetFailure
            _legacy_handlers[key] = LegacyHandler(name, platform, address)
    elif isinstance(fn, dict) or is_c_function:
        stages = dict(fn) if isinstance(fn, dict) else {"execute": fn}
        unknown = sorted(set(stages) - set(STAGES))
        if unknown:
            raise FfiRegistrationError(f"{where}: unknown stage(s) {unknown}; the stages "
                                       f"are {list(STAGES)}")
        if stages.get("execute") is None:
            raise FfiRegistrationError(f"{where}: the handler bundle needs an 'execute' "
                                       "handler")
        addresses = [_check_code(_handler_address(stages[s], f"{where}, stage {s}"),
                                 f"{where}, stage {s}")
                     if stages.get(s) is not None else 0 for s in STAGES]
        with _lock:
            if key in _python_handlers:
                raise FfiRegistrationError(f"Duplicate FFI handler registration for "
                                           f"{where}: a Python handler is registered")
            error = _error_buffer()
            # Never calls the handler (see the module docstring).
            code = _lib().XlaGpuFfiRegisterHandler(
                encoded, platform.encode(), *[a or None for a in addresses],
                traits, error, len(error))
            if code:
                raise FfiRegistrationError(error.value.decode(errors="replace"))
    elif callable(fn):
        with _lock:
            if _find_c_handler(name, platform) is not None or key in _legacy_handlers:
                raise FfiRegistrationError(f"Duplicate FFI handler registration for "
                                           f"{where}: a C handler is registered")
            old = _python_handlers.get(key)
            if old is not None and old.fn is not fn:
                raise FfiRegistrationError(f"Duplicate FFI handler registration for "
                                           f"{where} with a different handler")
            _python_handlers[key] = PythonHandler(name, platform, fn)
    else:
        raise FfiRegistrationError(
            f"{where}: expected a PyCapsule, a dict of PyCapsules by stage or a "
            f"callable, got {type(fn).__name__}")
    if platform == "cpu":
        from . import calls
        calls.bridge_into_interpreter(name)


def unregister_ffi_target(name: str, platform: str = "cpu") -> bool:
    """Forgets the handler of `name` on `platform` (xla_gpu's addition: XLA
    has no unregistration); True when there was one. Programs compiled (or
    loaded) before keep the handler they bound then; programs compiled
    after have none, or whatever is registered under the name next."""
    encoded = _target_name(name, "unregister_ffi_target")
    platform = canonical_platform(platform)
    with _lock:
        found = _python_handlers.pop((name, platform), None) is not None
        found |= _legacy_handlers.pop((name, platform), None) is not None
        _c_handler_cache.pop((name, platform), None)
        if _native_in_use:
            found |= bool(_native.lib().XlaGpuFfiUnregisterHandler(encoded,
                                                                   platform.encode()))
    if found and platform == "cpu":
        from . import calls
        calls.unbridge_from_interpreter(name)
    return found


def registered_targets(platform: str | None = None) -> tuple[tuple[str, str], ...]:
    """(name, platform) of every registered handler, C and Python, sorted;
    only `platform`'s when given."""
    entries = {*_python_handlers, *_legacy_handlers}
    if _native_in_use:
        lib = _native.lib()
        size = lib.XlaGpuFfiListHandlers(None, 0)
        buffer = ctypes.create_string_buffer(size)
        lib.XlaGpuFfiListHandlers(buffer, size)
        for line in buffer.value.decode().splitlines():
            if line:
                target, plat = line.rsplit("\t", 1)
                entries.add((target, plat))
    if platform is not None:
        wanted = canonical_platform(platform)
        entries = {e for e in entries if e[1] == wanted}
    return tuple(sorted(entries))


TYPED_FFI = "API_VERSION_TYPED_FFI"


def lookup(name: str, platform: str, api_version: str | None = None
           ) -> CHandler | LegacyHandler | PythonHandler | None:
    """The registration of `name` on `platform` that serves custom calls of
    `api_version` (HLO spelling; None: any), or None. A Python handler
    serves every version; a typed-FFI one API_VERSION_TYPED_FFI; a legacy
    one the others."""
    _target_name(name, "FFI lookup")
    platform = canonical_platform(platform)
    python = _python_handlers.get((name, platform))
    if python is not None:
        return python
    if api_version is None or api_version == TYPED_FFI:
        typed = _find_c_handler(name, platform)
        if typed is not None or api_version is not None:
            return typed
    return _legacy_handlers.get((name, platform))


def register_from_spec(spec: str, platform: str = "cpu") -> str:
    """Registers a handler named on a command line: "TARGET=LIBRARY:SYMBOL"
    (the library loaded after the FFI runtime, SYMBOL its exported
    XLA_FFI_Handler), optionally "...@PLATFORM". Returns the target name.
    For tools such as xla-gpu-run: `--ffi my_op=./libops.so:MyOp`."""
    if not isinstance(spec, str):
        raise FfiRegistrationError(f"FFI handler spec: expected a str "
                                   f"TARGET=LIBRARY:SYMBOL[@PLATFORM], got {spec!r}")
    text = spec
    if "@" in text.rsplit(":", 1)[-1]:
        text, platform = text.rsplit("@", 1)
    canonical_platform(platform)   # before loading anything
    target, sep, rest = text.partition("=")
    path, sep2, symbol = rest.rpartition(":")
    if not sep or not sep2 or not target or not path or not symbol:
        raise FfiRegistrationError(f"FFI handler spec {spec!r}: expected "
                                   "TARGET=LIBRARY:SYMBOL[@PLATFORM]")
    try:
        library = load_library(path)
    except FfiRegistrationError as e:
        raise FfiRegistrationError(f"FFI handler spec {spec!r}: cannot load {path}: {e}") \
            from None
    try:
        handler = getattr(library, symbol)
    except AttributeError:
        raise FfiRegistrationError(f"FFI handler spec {spec!r}: {path} has no symbol "
                                   f"{symbol!r}") from None
    register_ffi_target(target, pycapsule(handler), platform=platform)
    return target


# --- types and user data ---------------------------------------------------------


def register_ffi_type(name: str, type_registration: Any, platform: str = "cpu") -> int:
    """Registers a user type (what `jax.ffi.register_ffi_type` takes:
    {"type_id": PyCapsule of an XLA_FFI_TypeId*, "type_info": optional
    PyCapsule of an XLA_FFI_TypeInfo*}); a type id of 0 gets a fresh id
    written into the library's XLA_FFI_TypeId. Returns the id. Types are
    shared by all platforms (one process, one registry)."""
    encoded = _target_name(name, "register_ffi_type")
    canonical_platform(platform)
    if not isinstance(type_registration, dict) or "type_id" not in type_registration:
        raise FfiRegistrationError(f"FFI type '{name}': expected {{'type_id': capsule, "
                                   "'type_info': capsule}")
    id_address = _check_data(
        _capsule_pointer(type_registration["type_id"], f"FFI type '{name}' type_id"), 8,
        True, f"FFI type '{name}' type_id")
    deleter = None
    info = type_registration.get("type_info")
    if info is not None:
        info_address = _check_data(_capsule_pointer(info, f"FFI type '{name}' type_info"),
                                   24, False, f"FFI type '{name}' type_info")
        # XLA_FFI_TypeInfo: struct_size, extension_start, deleter.
        deleter = ctypes.c_void_p.from_address(info_address + 16).value
        if deleter:
            _check_code(deleter, f"FFI type '{name}' type_info's deleter")
    type_id = ctypes.c_int64.from_address(id_address)
    value = ctypes.c_int64(type_id.value)
    error = _error_buffer()
    code = _lib().XlaGpuFfiRegisterType(encoded, ctypes.byref(value), deleter,
                                        error, len(error))
    if code:
        raise FfiRegistrationError(error.value.decode(errors="replace"))
    type_id.value = value.value
    return int(value.value)


def type_id(name: str) -> int:
    """The id of a registered type (0 when none has that name)."""
    return int(_lib().XlaGpuFfiFindType(_target_name(name, "type_id")))


def set_user_data(type_name_or_id: str | int, data: Any) -> None:
    """Makes the object at address `data` (an int or a ctypes pointer) the
    execution context's user data of that type (`Ctx<UserData<T>>` in a
    handler); None (or a null pointer) removes it."""
    if isinstance(type_name_or_id, str):
        tid = type_id(type_name_or_id)
    else:
        tid = _integer(type_name_or_id, "set_user_data: the type id", 1, 1 << 63)
    if tid <= 0:
        raise FfiRegistrationError(f"set_user_data: no registered FFI type "
                                   f"{type_name_or_id!r}")
    address = 0 if data is None else _pointer_value(data, "set_user_data: data")
    _lib().XlaGpuFfiSetUserData(tid, address or None)


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

"""The handlers registered for custom-call targets, by name and platform
(`register_ffi_target` and the rest of xla_gpu.ffi's registration API,
re-exported by the package): C handlers in libXlaGpuFfi.so's registry,
legacy custom-call functions and Python callables here. A cpu
registration is bridged into the reference interpreter (`calls`).
"""

from __future__ import annotations

import ctypes
import numbers
import os
import threading
from typing import Any

from .._ctypes_arrays import char_buffer
from . import _native
from .base import (STAGES, TYPED_FFI, CHandler, FfiRegistrationError, LegacyHandler,
                   PythonHandler, canonical_platform)

__all__ = ["register_ffi_target", "register_ffi_type", "unregister_ffi_target",
           "pycapsule", "registered_targets", "load_library", "set_user_data", "type_id",
           "register_from_spec", "lookup"]


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
    return char_buffer(_native.ERROR_CAPACITY)


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
        calls.bridge_into_interpreter(name, lookup)
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
        calls.bridge_into_interpreter(name, lookup)


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

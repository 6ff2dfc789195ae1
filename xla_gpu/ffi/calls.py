"""Running registered FFI handlers: for the custom_call thunk (cpu and cuda
targets) and for the reference interpreter (cpu handlers).

A C handler runs through libXlaGpuFfi.so: one native *instance* per
custom-call instruction holds the decoded attributes and the state its
stages set; a call passes buffer descriptors (XLA element type, data
pointer, dims) and, on cuda, the stream. A Python handler gets numpy
arrays (cpu) or device arrays (cuda). numpy + ctypes (+ cuda-python on
cuda) only.
"""

from __future__ import annotations

import ctypes
import inspect
import itertools
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from .._ctypes_arrays import array_of, array_type, char_buffer
from ..errors import HloError, UnsupportedError
from . import _native, registry
from .base import (ERROR_CODES, STAGES, TYPED_FFI, CHandler, FfiError, LegacyHandler,
                   PythonHandler)
from .attributes import encode_attributes, handler_attributes

__all__ = ["CallSite", "thunk_handler", "thunk_dispatcher", "bridge_into_interpreter",
           "unbridge_from_interpreter", "DeviceBuffer", "DTYPE_CODES"]

PLATFORM_CODES = {"cpu": 0, "cuda": 1}

# HLO element type -> XLA_FFI_DataType (xla::PrimitiveType numbers).
DTYPE_CODES = {
    "pred": 1, "s8": 2, "s16": 3, "s32": 4, "s64": 5, "u8": 6, "u16": 7, "u32": 8,
    "u64": 9, "f16": 10, "f32": 11, "f64": 12, "c64": 15, "bf16": 16, "c128": 18,
    "f8e5m2": 19, "f8e4m3fn": 20, "f8e4m3b11fnuz": 23, "f8e5m2fnuz": 24,
    "f8e4m3fnuz": 25, "f8e4m3": 28, "f8e3m4": 29, "f4e2m1fn": 32, "f8e8m0fnu": 33,
}
# xla_gpu keeps these one element per byte; XLA hands them to handlers packed.
_SUB_BYTE = {"s1", "s2", "s4", "u1", "u2", "u4"}

_run_ids = itertools.count(1)


def _dtype_code(element_type: str, where: str) -> int:
    if element_type in _SUB_BYTE:
        raise UnsupportedError(f"{where}: {element_type} buffers are stored one element per "
                               "byte by xla_gpu but packed by XLA; an FFI handler cannot "
                               "take them")
    code = DTYPE_CODES.get(element_type)
    if code is None:
        raise UnsupportedError(f"{where}: element type {element_type} has no XLA FFI "
                               "data type")
    return code


class Buffers:
    """ctypes descriptors of a fixed list of buffers (element type, dims);
    the data pointers are set for every call."""

    def __init__(self, specs: Sequence[tuple[int, Sequence[int]]]):
        self.count = len(specs)
        self.array = array_type(_native.BufferDesc, max(self.count, 1))()
        self._dims = []
        for i, (code, dims) in enumerate(specs):
            extents = array_of(ctypes.c_int64, [int(d) for d in dims])
            self._dims.append(extents)
            desc = self.array[i]
            desc.dtype = code
            desc.rank = len(dims)
            desc.dims = ctypes.cast(extents, ctypes.POINTER(ctypes.c_int64))

    def set(self, pointers: Sequence[int]) -> None:
        for desc, pointer in zip(self.array, pointers):
            desc.data = pointer or None


def _code_name(code: int) -> str:
    return ERROR_CODES[code] if 0 <= code < len(ERROR_CODES) else f"CODE_{code}"


# Execute handlers whose FFI API version was found supported (by address).
_supported_handlers: set[int] = set()


def _check_api_version(registration: CHandler, where: str) -> None:
    """Asks the execute handler for its FFI API version (by calling it with
    the metadata extension) before its first call: registering does not
    (see xla_gpu.ffi), so a handler built for a version this runtime does
    not speak is refused here."""
    execute = registration.bundle[3]
    if execute in _supported_handlers:
        return
    error = char_buffer(_native.ERROR_CAPACITY)
    code = _native.lib().XlaGpuFfiCheckHandler(execute or None, error, len(error))
    if code:
        message = error.value.decode(errors="replace")
        raise FfiError(f"{where}: {message}", code=_code_name(code),
                       target=registration.name, stage="instantiate",
                       handler_message=message)
    _supported_handlers.add(execute)


class CallSite:
    """The native instance of one custom-call instruction: its handlers,
    attributes and the state its stages set (freed with this object)."""

    def __init__(self, registration: CHandler, attributes: dict, where: str):
        self.registration = registration
        self.where = where
        try:
            blob = encode_attributes(attributes)
        except HloError as e:
            raise HloError(f"{where}: {e}") from None
        _check_api_version(registration, where)
        lib = _native.lib()
        bundle = array_of(ctypes.c_void_p, [a or None for a in registration.bundle])
        error = char_buffer(_native.ERROR_CAPACITY)
        handle = lib.XlaGpuFfiInstanceCreate(bundle, blob, len(blob), error, len(error))
        if not handle:
            raise HloError(f"{where}: {error.value.decode(errors='replace')}")
        self.handle = handle
        self._error = error    # reused by every call of this instance
        self.started = False   # instantiate / prepare / initialize have run
        self.broken = False    # one of them failed: build a new instance
        self._finalizer = weakref.finalize(self, lib.XlaGpuFfiInstanceDestroy, handle)

    def run(self, platform: str, stream: int, run_id: int, args: Buffers,
            rets: Buffers) -> None:
        """The stages still due, then execute; FfiError on a handler error."""
        lib, error = _native.lib(), self._error
        stages = (3,) if self.started else (0, 1, 2, 3)
        for stage in stages:
            code = lib.XlaGpuFfiCall(self.handle, stage, PLATFORM_CODES[platform],
                                     stream or None, 0, run_id, args.count, args.array,
                                     rets.count, rets.array, error, len(error))
            if code:
                if stage != 3:
                    self.broken = True
                message = error.value.decode(errors="replace")
                name = _code_name(code)
                raise FfiError(f"{self.where}: the FFI handler's {STAGES[stage]} stage "
                               f"failed: {name}: {message}", code=name,
                               target=self.registration.name, stage=STAGES[stage],
                               handler_message=message)
            if stage == 2:
                self.started = True


def _where(instruction: str, target: str, platform: str) -> str:
    return f"custom call '{instruction}' (target '{target}', platform {platform})"


# The legacy ABI's calling conventions (XlaGpuFfiCallLegacy), by platform
# and the instruction's api_version.
_LEGACY_CONVENTIONS = {
    ("cpu", ""): 0, ("cpu", "API_VERSION_ORIGINAL"): 0,
    ("cpu", "API_VERSION_STATUS_RETURNING"): 1,
    ("cpu", "API_VERSION_STATUS_RETURNING_UNIFIED"): 2,
    ("cuda", ""): 3, ("cuda", "API_VERSION_ORIGINAL"): 3,
    ("cuda", "API_VERSION_STATUS_RETURNING"): 4,
    ("cuda", "API_VERSION_STATUS_RETURNING_UNIFIED"): 4,
}


def _legacy_convention(platform: str, api_version: str, where: str) -> int:
    convention = _LEGACY_CONVENTIONS.get((platform, api_version))
    if convention is None:
        raise UnsupportedError(f"{where}: the registered handler uses XLA's legacy "
                               f"custom-call ABI, which has no api_version={api_version}")
    return convention


def _call_legacy(registration: LegacyHandler, convention: int, stream: int, out: int,
                 buffers: Sequence[int], opaque: str, where: str) -> None:
    table = array_of(ctypes.c_void_p, [b or None for b in buffers])
    data = opaque.encode("utf-8", errors="surrogateescape")
    error = char_buffer(_native.ERROR_CAPACITY)
    code = _native.lib().XlaGpuFfiCallLegacy(registration.address, convention, stream or None,
                                            out or None, table, data, len(data), error,
                                            len(error))
    if code:
        message = error.value.decode(errors="replace")
        name = _code_name(code)
        raise FfiError(f"{where}: the custom-call function failed: {message}", code=name,
                       target=registration.name, handler_message=message)


def _legacy_out(results: Sequence[int], result_is_tuple: bool) -> tuple[int, Any]:
    """The cpu ABI's `out`: the result buffer, or for a tuple result the
    address of a table of its elements' buffers (and the table, to keep)."""
    if not result_is_tuple:
        return results[0], None
    table = (ctypes.c_void_p * max(len(results), 1))(*[r or None for r in results])
    return ctypes.addressof(table), table


def _check_typed_ffi(api_version: str, where: str) -> None:
    if api_version != TYPED_FFI:
        raise UnsupportedError(
            f"{where}: api_version={api_version or 'API_VERSION_ORIGINAL'} is XLA's legacy "
            "custom-call ABI; the registered handler is a typed-FFI handler "
            "(api_version=API_VERSION_TYPED_FFI)")


def _run_id(ctx: Any) -> int:
    rid = getattr(ctx, "_xla_gpu_ffi_run_id", None)
    if rid is None:
        rid = next(_run_ids)
        try:
            ctx._xla_gpu_ffi_run_id = rid
        except AttributeError:
            pass
    return rid


# --- Python handlers ---------------------------------------------------------------


_conventions: dict[tuple, bool] = {}


def _takes_results(fn, n_operands: int, n_results: int, kwargs: dict, where: str) -> bool:
    """Whether `fn` takes the result buffers after the operands (else it
    returns the results); decided once per handler and call shape."""
    key = (fn, n_operands, n_results, tuple(kwargs))
    decided = _conventions.get(key)
    if decided is None:
        decided = _conventions[key] = _decide_convention(fn, n_operands, n_results, kwargs,
                                                         where)
    return decided


def _decide_convention(fn, n_operands: int, n_results: int, kwargs: dict,
                       where: str) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    placeholders = list(range(n_operands + n_results))
    if n_results:
        try:
            signature.bind(*placeholders, **kwargs)
            return True
        except TypeError:
            pass
    try:
        signature.bind(*placeholders[:n_operands], **kwargs)
        return False
    except TypeError as e:
        raise FfiError(f"{where}: the Python handler{signature} takes neither the "
                       f"{n_operands} operand(s) nor the operands and the {n_results} "
                       f"result buffer(s) with keyword arguments {sorted(kwargs)}: {e}",
                       code="INVALID_ARGUMENT") from None


def _call_python(registration: PythonHandler, operands: list, results: list, kwargs: dict,
                 where: str) -> list | None:
    """Calls a Python handler. Returns its results, one value per result
    buffer, or None when it wrote them in place: it takes the result
    buffers after the operands and returned None. A handler that returns
    its results must return them all (None is an error, not "nothing to
    write": the buffers would keep whatever they held)."""
    fn = registration.fn
    passes = _takes_results(fn, len(operands), len(results), kwargs, where)
    try:
        value = fn(*operands, *results, **kwargs) if passes else fn(*operands, **kwargs)
    except FfiError:
        raise
    except Exception as e:
        raise FfiError(f"{where}: the Python handler raised {type(e).__name__}: {e}",
                       code="UNKNOWN", target=registration.name,
                       handler_message=str(e)) from e
    if value is None:
        if passes or not results:
            return None
        raise FfiError(f"{where}: the Python handler returned None; the custom call has "
                       f"{len(results)} result(s): return them, or take the result buffers "
                       "after the operands and fill them in place",
                       code="INVALID_ARGUMENT", target=registration.name)
    return _returned(value, len(results), where, registration.name)


def _returned(value: Any, count: int, where: str, target: str) -> list:
    if count == 1 and not isinstance(value, (tuple, list)):
        return [value]
    if not isinstance(value, (tuple, list)) or len(value) != count:
        got = len(value) if isinstance(value, (tuple, list)) else 1
        raise FfiError(f"{where}: the Python handler returned {got} value(s); the custom "
                       f"call has {count} result(s)", code="INVALID_ARGUMENT", target=target)
    return list(value)


def _result_value(item: Any, k: int, shape: Sequence[int], dtype: np.dtype, where: str,
                  target: str) -> np.ndarray:
    """Returned value `k` as an array of the result's shape and dtype. A
    numpy value (anything with a dtype) must have that dtype or one numpy
    converts to it without loss; Python numbers (and lists of them) take
    the result's dtype within their kind, as numpy's own promotion does."""
    def refuse(what: str, why: str = "") -> FfiError:
        return FfiError(f"{where}: the Python handler returned {what} for result {k}, "
                        f"expected {dtype}{list(shape)}{why}", code="INVALID_ARGUMENT",
                        target=target)

    if item is None:
        raise refuse("None")
    try:
        array = np.asarray(item)
    except Exception as e:   # noqa: BLE001  (any object can be returned)
        raise refuse(f"a {type(item).__name__} that is no array ({e})") from None
    if array.shape != tuple(shape):
        raise refuse(f"shape {list(array.shape)}")
    if array.dtype != dtype:
        if hasattr(item, "dtype"):
            fits = np.can_cast(array.dtype, dtype, "safe")
        else:   # Python numbers: weakly typed
            fits = np.can_cast(array.dtype, dtype, "same_kind") or (
                dtype.kind == "V" and array.dtype.kind in "biuf")   # ml_dtypes' floats
        if not fits:
            lossy = np.can_cast(array.dtype, dtype, "same_kind")
            raise refuse(str(array.dtype), " (it converts to that only with loss: convert "
                         "it in the handler)" if lossy else "")
        array = array.astype(dtype)
    return array


def _store_host(values: list | None, results: list[np.ndarray], where: str,
                target: str) -> None:
    if values is None:
        return
    for k, (item, out) in enumerate(zip(values, results)):
        out[...] = _result_value(item, k, out.shape, out.dtype, where, target)


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


class DeviceBuffer:
    """A device array handed to a Python handler on cuda: the buffer's
    address, shape and dtype, readable by any CUDA library through
    `__cuda_array_interface__` (v3, with the call's stream). Not owned:
    valid during the call only."""

    def __init__(self, ptr: int, shape: Sequence[int], dtype: np.dtype, stream: int,
                 readonly: bool):
        self.ptr, self.shape, self.dtype = int(ptr), tuple(shape), np.dtype(dtype)
        self.stream, self.readonly = int(stream), readonly
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": [("", self.dtype.str)],
                "data": (self.ptr, self.readonly), "strides": None, "version": 3,
                # CAI: 1 is the legacy default stream (0 is not allowed).
                "stream": self.stream or 1}

    def to_host(self) -> np.ndarray:
        """A host copy (synchronizes the stream)."""
        from ..runtime.cuda import _check, _driver, current_context
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            with current_context():
                cu = _driver()
                _check("cuMemcpyDtoHAsync", cu.cuMemcpyDtoHAsync(out.ctypes.data, self.ptr,
                                                                 self.nbytes, self.stream))
                _check("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))
        return out

    def __repr__(self) -> str:
        return f"DeviceBuffer({self.dtype}{list(self.shape)} at 0x{self.ptr:x})"


def _store_device(values: list | None, results: list[DeviceBuffer], where: str,
                  target: str) -> None:
    if values is None:
        return
    from ..runtime.cuda import _check, _driver
    cu = _driver()
    for k, (item, out) in enumerate(zip(values, results)):
        if hasattr(item, "__cuda_array_interface__") and not isinstance(item, np.ndarray):
            cai = item.__cuda_array_interface__
            shape, dtype = tuple(cai["shape"]), np.dtype(cai["typestr"])
            if shape != out.shape or dtype != out.dtype or cai.get("strides") not in (None,):
                raise FfiError(f"{where}: result {k}: the Python handler returned a "
                               f"{dtype}{list(shape)} device array; expected a contiguous "
                               f"{out.dtype}{list(out.shape)}", code="INVALID_ARGUMENT",
                               target=target)
            if out.nbytes and int(cai["data"][0]) != out.ptr:
                _check("cuMemcpyDtoDAsync", cu.cuMemcpyDtoDAsync(
                    out.ptr, int(cai["data"][0]), out.nbytes, out.stream))
            continue
        host = np.ascontiguousarray(_result_value(item, k, out.shape, out.dtype, where,
                                                  target))
        if out.nbytes:
            _check("cuMemcpyHtoDAsync", cu.cuMemcpyHtoDAsync(out.ptr, host.ctypes.data,
                                                             out.nbytes, out.stream))
            _check("cuStreamSynchronize", cu.cuStreamSynchronize(out.stream))


# --- the custom_call thunk ------------------------------------------------------------


class _ThunkSite:
    """What one custom_call thunk keeps between executions."""

    def __init__(self, registration: CHandler, thunk: Any, platform: str):
        where = _where(thunk.name, thunk.target, platform)
        _check_typed_ffi(thunk.api_version, where)
        self.key = (registration.bundle, platform)
        self.site = CallSite(registration, handler_attributes(
            thunk.target, thunk.api_version, thunk.backend_config, where), where)
        self.args = Buffers([(_dtype_code(r.element_type, where), r.dims)
                             for r in thunk.operands])
        self.rets = Buffers([(_dtype_code(r.element_type, where), r.dims)
                             for r in thunk.results])


def _thunk_site(registration: CHandler, thunk: Any, platform: str,
                device: int = 0) -> _ThunkSite:
    """The thunk's site on `device`. A program run on several devices runs
    each thunk on all of them at once (a thread each): every device has a
    site of its own (its argument tables, its handler instance and state),
    or one device's buffers would reach another's call."""
    sites = thunk.__dict__.setdefault("_xla_gpu_ffi_sites", {})   # atomic under the GIL
    state = sites.get(device)
    if state is None or state.key != (registration.bundle, platform) or state.site.broken:
        state = sites[device] = _ThunkSite(registration, thunk, platform)
    return state


def _device_of(ctx: Any) -> int:
    """The device a context runs on (0 on one device)."""
    endpoint = getattr(ctx, "collectives", None)
    return 0 if endpoint is None else int(endpoint.device)


def _run_c_thunk(registration: CHandler, ctx: Any, thunk: Any) -> None:
    platform = ctx.target
    state = _thunk_site(registration, thunk, platform, _device_of(ctx))
    run_id = _run_id(ctx)
    # Buffers are handed over as they lie, in their layouts (XLA's FFI
    # passes no layout): the compiler put each operand in the layout the call
    # requires and reads the results in the layouts of its shape
    # (hlo.passes.custom_call_layouts).
    if platform == "cpu":
        state.args.set([ctx.pointer(r.slice) for r in thunk.operands])
        state.rets.set([ctx.pointer(r.slice) for r in thunk.results])
        state.site.run("cpu", 0, run_id, state.args, state.rets)
        return
    from ..runtime.cuda import current_context, stream_handle
    state.args.set([ctx.pointer(r.slice) for r in thunk.operands])
    state.rets.set([ctx.pointer(r.slice) for r in thunk.results])
    with current_context():
        state.site.run("cuda", stream_handle(ctx.stream), run_id, state.args, state.rets)


def _run_python_thunk(registration: PythonHandler, ctx: Any, thunk: Any) -> None:
    platform = ctx.target
    where = _where(thunk.name, thunk.target, platform)
    kwargs = handler_attributes(thunk.target, thunk.api_version, thunk.backend_config, where)
    if platform == "cpu":
        operands = []
        for ref in thunk.operands:
            view = ctx.array(ref)
            operands.append(_readonly(view) if view.dtype == ref.dtype
                            else view.astype(ref.dtype))
        results, writebacks = [], []
        for ref in thunk.results:
            view = ctx.array(ref)
            if view.dtype == ref.dtype:
                results.append(view)
            else:   # sub-byte storage: hand out the user dtype, store back
                array = view.astype(ref.dtype)
                results.append(array)
                writebacks.append((array, view))
        values = _call_python(registration, operands, results, kwargs, where)
        _store_host(values, results, where, registration.name)
        for array, view in writebacks:
            view[...] = array.astype(view.dtype)
        return
    from ..runtime.cuda import current_context, stream_handle
    if "stream" in kwargs:
        raise FfiError(f"{where}: an attribute named 'stream' collides with the stream "
                       "argument of Python handlers on cuda", code="INVALID_ARGUMENT")
    stream = stream_handle(ctx.stream)
    for ref in [*thunk.operands, *thunk.results]:
        if not ref.is_row_major or ref.element_type in _SUB_BYTE:
            raise UnsupportedError(f"{where}: buffer {ref.describe()} is not a row-major "
                                   "array of whole bytes")
    operands = [DeviceBuffer(ctx.pointer(r.slice), r.dims, r.dtype, stream, True)
                for r in thunk.operands]
    results = [DeviceBuffer(ctx.pointer(r.slice), r.dims, r.dtype, stream, False)
               for r in thunk.results]
    with current_context():
        values = _call_python(registration, operands, results, {**kwargs, "stream": stream},
                              where)
        _store_device(values, results, where, registration.name)


def _run_legacy_thunk(registration: LegacyHandler, ctx: Any, thunk: Any) -> None:
    platform = ctx.target
    where = _where(thunk.name, thunk.target, platform)
    convention = _legacy_convention(platform, thunk.api_version, where)
    if platform == "cpu":
        if any(thunk.operand_arity):
            raise UnsupportedError(f"{where}: tuple operands of a legacy cpu custom call "
                                   "are not supported (pass their elements)")
        # Buffers as they lie, in their layouts (see _run_c_thunk).
        ins = [ctx.pointer(r.slice) for r in thunk.operands]
        outs = [ctx.pointer(r.slice) for r in thunk.results]
        # The thunk keeps result leaves only: several leaves are a tuple (a
        # one-element tuple result passes its element's buffer).
        out, _table = _legacy_out(outs, len(outs) != 1)
        _call_legacy(registration, convention, 0, out, ins, thunk.backend_config, where)
        return
    from ..runtime.cuda import current_context, stream_handle
    buffers = [ctx.pointer(r.slice) for r in [*thunk.operands, *thunk.results]]
    with current_context():
        _call_legacy(registration, convention, stream_handle(ctx.stream), 0, buffers,
                     thunk.backend_config, where)


def thunk_handler(registration: CHandler | LegacyHandler | PythonHandler):
    """`handler(ctx, thunk)` running `registration` for the custom_call thunk."""
    if isinstance(registration, CHandler):
        return lambda ctx, thunk: _run_c_thunk(registration, ctx, thunk)
    if isinstance(registration, LegacyHandler):
        return lambda ctx, thunk: _run_legacy_thunk(registration, ctx, thunk)
    return lambda ctx, thunk: _run_python_thunk(registration, ctx, thunk)


def thunk_dispatcher(target: str, platform: str, python: PythonHandler | None,
                     typed: CHandler | None, legacy: LegacyHandler | None):
    """`handler(ctx, thunk)` for `target` over the registrations given
    (resolved by the caller, once: what was registered when the program was
    compiled or loaded): the Python handler, else the one that serves the
    thunk's api_version (typed FFI or legacy)."""
    handlers = {id(r): thunk_handler(r) for r in (python, typed, legacy) if r is not None}

    def dispatch(ctx: Any, thunk: Any) -> None:
        if python is not None:
            registration = python
        elif thunk.api_version == TYPED_FFI:
            registration = typed
        else:
            registration = legacy
        if registration is None:
            where = _where(thunk.name, target, platform)
            kind = "typed-FFI" if thunk.api_version == TYPED_FFI else "legacy (api_version=0)"
            other = "legacy" if thunk.api_version == TYPED_FFI else "typed-FFI"
            raise UnsupportedError(f"{where}: the custom call has api_version="
                                   f"{thunk.api_version or 'API_VERSION_ORIGINAL'} and needs a "
                                   f"{kind} handler; only a {other} one was registered "
                                   "when the program was compiled")
        handlers[id(registration)](ctx, thunk)
    return dispatch


# --- the reference interpreter ----------------------------------------------------------


def _flatten(values: Sequence[Any]) -> list[np.ndarray]:
    """Tuple operands (nested too) flattened depth first, as XLA does."""
    out: list[np.ndarray] = []
    stack = list(reversed(values))
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        else:
            out.append(np.asarray(item))
    return out


def _rebuild(shape: Any, leaves: list[np.ndarray]) -> Any:
    """The value of `shape` (nested tuples) from its leaves, depth first
    (iteratively: deep tuples are safe)."""
    if not shape.is_tuple:
        return leaves[0]
    position = 0
    stack: list[tuple[Any, list[Any]]] = [(shape, [])]
    while True:
        node, children = stack[-1]
        if len(children) == len(node.tuple_shapes):
            stack.pop()
            if not stack:
                return tuple(children)
            stack[-1][1].append(tuple(children))
            continue
        child = node.tuple_shapes[len(children)]
        if child.is_tuple:
            stack.append((child, []))
        else:
            children.append(leaves[position])
            position += 1


class _InterpreterBridge:
    """The interpreter's handler for a target registered here: looks the
    registration up (`lookup`, the registry's) when the custom call is
    evaluated."""

    def __init__(self, target: str, lookup: Callable[..., Any]):
        self.target = target
        self.lookup = lookup

    def __call__(self, inst: Any, *operands: Any) -> Any:
        where = _where(inst.name, self.target, "cpu")
        api_version = str(inst.attrs.get("api_version", ""))
        registration = self.lookup(self.target, "cpu", api_version)
        if registration is None:
            raise HloError(f"{where}: no handler for custom calls with api_version="
                           f"{api_version or 'API_VERSION_ORIGINAL'} is registered for the "
                           "target on cpu")
        # (The interpreter refuses results over its size limit before it
        # calls a handler.)
        leaves = inst.shape.leaves()
        for leaf in leaves:
            if leaf.element_type not in DTYPE_CODES:
                _dtype_code(leaf.element_type, where)   # raises, naming the type
        results = [np.zeros(leaf.dims, leaf.dtype) for leaf in leaves]
        flat = _flatten(operands)
        from ..hlo.passes.custom_call_layouts import required_operand_shapes
        required = required_operand_shapes(inst)   # also checks the constraints
        if isinstance(registration, PythonHandler):
            kwargs = handler_attributes(self.target, api_version,
                                        inst.attrs.get("backend_config", ""), where)
            values = _call_python(registration, [_readonly(a) for a in flat], results,
                                  kwargs, where)
            _store_host(values, results, where, registration.name)
            return _rebuild(inst.shape, results)
        # A C handler reads raw memory: each operand in the layout the call
        # requires, each result in its shape's layout, as the compiled
        # program lays them out (hlo.passes.custom_call_layouts).
        operand_leaves = [leaf for s in required for leaf in s.leaves()]
        if len(operand_leaves) != len(flat):
            raise HloError(f"{where}: {len(flat)} operand arrays for "
                           f"{len(operand_leaves)} operand shapes")
        arrays = [np.ascontiguousarray(leaf.physical_from_logical(np.asarray(a)))
                  for leaf, a in zip(operand_leaves, flat)]
        physical = [np.zeros(leaf.physical_shape().dims, leaf.dtype) for leaf in leaves]
        results = [leaf.logical_from_physical(r) for leaf, r in zip(leaves, physical)]
        if isinstance(registration, LegacyHandler):
            convention = _legacy_convention("cpu", api_version, where)
            if any(o.shape.is_tuple for o in inst.operands):
                raise UnsupportedError(f"{where}: tuple operands of a legacy cpu custom "
                                       "call are not supported (pass their elements)")
            if inst.shape.is_tuple and any(s.is_tuple for s in inst.shape.tuple_shapes):
                raise UnsupportedError(f"{where}: nested tuple results of a legacy cpu "
                                       "custom call are not supported")
            out, _table = _legacy_out([r.ctypes.data for r in physical], inst.shape.is_tuple)
            config = inst.attrs.get("backend_config", "")
            _call_legacy(registration, convention, 0, out, [a.ctypes.data for a in arrays],
                         config if isinstance(config, str) else "", where)
            return _rebuild(inst.shape, results)
        _check_typed_ffi(api_version, where)
        args = Buffers([(_dtype_code(leaf.element_type, where), leaf.dims)
                        for leaf in operand_leaves])
        rets = Buffers([(_dtype_code(leaf.element_type, where), leaf.dims) for leaf in leaves])
        args.set([a.ctypes.data for a in arrays])
        rets.set([r.ctypes.data for r in physical])
        # One instance per instruction of a parsed module, as the runtime
        # keeps one per compiled program: state carries across evaluations
        # (a loop body's custom call sees its state again).
        cached = _interpreter_sites.get(inst)
        if cached is None or cached.registration != registration or cached.broken:
            cached = CallSite(registration, handler_attributes(
                self.target, api_version, inst.attrs.get("backend_config", ""), where), where)
            _interpreter_sites[inst] = cached
        cached.run("cpu", 0, next(_run_ids), args, rets)
        return _rebuild(inst.shape, results)


_interpreter_sites: "weakref.WeakKeyDictionary[Any, CallSite]" = weakref.WeakKeyDictionary()


def bridge_into_interpreter(target: str, lookup: Callable[..., Any]) -> None:
    """Makes the reference interpreter evaluate custom calls to `target`
    with the handler registered for cpu, found by `lookup(target, platform,
    api_version)` when a call is evaluated (the registry passes its own:
    it sits above this module)."""
    registry.register_custom_call(target, _InterpreterBridge(target, lookup), instruction=True)


def unbridge_from_interpreter(target: str) -> None:
    """Undoes bridge_into_interpreter (a Python handler registered for the
    interpreter since stays)."""
    if isinstance(registry.instruction_handler(target), _InterpreterBridge):
        registry.unregister_custom_call(target)

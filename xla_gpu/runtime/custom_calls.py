"""Custom-call handlers for the custom_call thunk, found by target name and
platform. numpy only.

Where handlers come from, first hit wins:
  1. `xla_gpu.ffi.runtime_handler(target, platform)` (XLA's FFI: handlers
     registered as with `jax.ffi.register_ffi_target`);
  2. on the cpu target, the Python handlers the reference interpreter runs
     too (`xla_gpu.ffi.registry.register_custom_call(target, fn)`, also
     `xla_gpu.hlo.interpreter.register_custom_call`):
     `fn(*operands, **attributes)` gets numpy arrays (a tuple operand as a
     tuple) and the attributes decoded from a typed-FFI `backend_config`
     (`{scale = 2.0 : f32}` -> scale=np.float32(2.0)); an older-API call gets
     `backend_config=<str>`. It returns the result (a sequence for a tuple
     result), which is written into the result buffers.

A handler, as the thunk calls it, is `handler(ctx, thunk)`. `lookup`
resolves the registration when it is called, and the handler it returns
keeps calling that registration: a program binds its custom calls when it
is compiled or loaded (`ProgramExecutable._bind_custom_calls`), so that
unregistering or re-registering a target later does not change what an
existing program calls.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import HloError

__all__ = ["lookup", "unbound"]


def lookup(target: str, platform: str) -> Callable[[Any, Any], None] | None:
    """`handler(ctx, thunk)` bound to what is registered for `target` on
    `platform` now, or None."""
    from ..ffi import registry, runtime_handler
    handler = runtime_handler(target, platform)
    if handler is not None:
        return handler
    if platform != "cpu":
        return None
    fn = registry.custom_call_handler(target)
    if fn is None:
        return None
    return lambda ctx, thunk: _call_python(fn, ctx, thunk)


def _call_python(fn, ctx, thunk) -> None:
    from ..ffi import registry
    from ..ffi.attributes import handler_attributes
    # A token (the order of side effects) has no data: None to the handler.
    flat = [None if ref.element_type == "token" else
            np.array(ctx.array(ref)).astype(ref.dtype, copy=False) for ref in thunk.operands]
    operands: list[Any] = []
    position = 0
    arities = thunk.operand_arity or [0] * len(flat)
    for arity in arities:
        if arity == 0:
            operands.append(flat[position])
            position += 1
        else:
            operands.append(tuple(flat[position:position + arity]))
            position += arity
    kwargs = handler_attributes(thunk.target, thunk.api_version, thunk.backend_config)
    result = registry.call_handler(fn, thunk.target, operands, kwargs)
    if result is None and not thunk.results:
        return   # an effect with no result
    if result is None:
        raise HloError(f"the handler of custom call '{thunk.target}' returned None; the "
                       f"instruction has {len(thunk.results)} result(s) to return")
    if len(thunk.results) == 1 and not isinstance(result, (tuple, list)):
        results = [result]
    else:
        results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(thunk.results):
        raise HloError(f"the handler of custom call '{thunk.target}' returned "
                       f"{len(results)} results, the instruction has {len(thunk.results)}")
    for k, (ref, value) in enumerate(zip(thunk.results, results)):
        if ref.element_type == "token":
            continue
        value = np.asarray(value)
        if tuple(value.shape) != tuple(ref.dims):
            raise HloError(f"the handler of custom call '{thunk.target}' returned shape "
                           f"{list(value.shape)} for result {k}, expected {ref.describe()}")
        ctx.array(ref)[...] = value.astype(ref.storage_dtype, copy=False)


def unbound(target: str, platform: str) -> Callable[[Any, Any], None]:
    """The handler of a custom call whose target had no handler when its
    program was compiled or loaded: refuses to run (a handler registered
    since is not picked up; compile or load the program again)."""
    def refuse(ctx: Any, thunk: Any) -> None:
        from .thunks import ThunkError
        raise ThunkError(f"custom call '{thunk.name}': no handler registered for target "
                         f"'{target}' on platform '{platform}' when the program was compiled "
                         "or loaded (custom calls are bound then: register the handler "
                         f"first, then compile or load the program){hint}")
    from ..ffi.jaxlib_targets import missing_hint
    hint = missing_hint(target, platform)
    return refuse

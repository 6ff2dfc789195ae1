"""The Python handlers of custom calls, by target name: what the reference
interpreter (`xla_gpu.hlo.evaluate`) and the cpu custom_call thunk run for
a custom call with no C handler.

Two kinds of entry, one per target (a later registration replaces the
earlier one, of either kind):

* `fn(*operands, **attributes)` (`register_custom_call(target, fn)`): numpy
  arrays in (a tuple operand as a tuple of arrays), the attributes decoded
  from the call's backend_config (`attributes.handler_attributes`), the
  result array (a sequence of them for a tuple result) out. The interpreter
  and the cpu thunk runtime both run these.
* `fn(inst, *operands)` (`instruction=True`): gets the custom-call
  instruction itself and decodes what it needs. How the handlers registered
  with `register_ffi_target` reach the interpreter (`calls.bridge_into_interpreter`);
  the thunk runtime finds those through `runtime_handler` instead.

XLA's own targets (TopK, the cuBLAS and cuDNN calls, sharding annotations)
are the interpreter's (`xla_gpu.hlo.interpreter.custom_calls`): a handler
registered here under one of their names wins. numpy only: the interpreter
imports this module when it evaluates a custom call.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..errors import HloError

__all__ = ["CustomCallHandler", "register_custom_call", "unregister_custom_call",
           "registered_custom_calls", "custom_call_handler", "instruction_handler",
           "call_handler"]

CustomCallHandler = Callable[..., Any]
_handlers: dict[str, CustomCallHandler] = {}
# Handlers registered with instruction=True: fn(inst, *operands).
_instruction_handlers: dict[str, CustomCallHandler] = {}


def register_custom_call(target: str, fn: CustomCallHandler, *,
                         instruction: bool = False) -> None:
    """Makes `fn` the reference implementation of custom calls to
    `target`: `fn(*operands, **attributes)` gets numpy arrays (a tuple
    operand as a tuple of arrays) and the attributes decoded from the
    typed-FFI `backend_config` (`{scale = 2.0 : f32, mode = 1 : i32}` ->
    scale=np.float32(2.0), mode=np.int32(1)); an older-API custom call gets
    `backend_config=<str>` when it has one. It returns the result array, or
    a sequence of arrays for a tuple result. A later registration of the
    same target replaces the earlier one.

    `instruction=True`: `fn(inst, *operands)` gets the custom-call
    instruction itself (its result shape, backend_config, api_version)
    and decodes what it needs (how `xla_gpu.ffi` bridges FFI handlers
    into the interpreter)."""
    if not isinstance(target, str) or not target:
        raise ValueError("register_custom_call needs a non-empty target name")
    if not callable(fn):
        raise TypeError(f"the handler of '{target}' is not callable")
    _instruction_handlers.pop(target, None)
    _handlers.pop(target, None)
    (_instruction_handlers if instruction else _handlers)[target] = fn


def unregister_custom_call(target: str) -> None:
    """Forgets the handler of `target` (no error when there is none)."""
    _handlers.pop(target, None)
    _instruction_handlers.pop(target, None)


def registered_custom_calls() -> tuple[str, ...]:
    """The targets with a registered Python handler (of either kind)."""
    return tuple(sorted({*_handlers, *_instruction_handlers}))


def custom_call_handler(target: str) -> CustomCallHandler | None:
    """The `fn(*operands, **attributes)` handler of `target`, or None."""
    return _handlers.get(target)


def instruction_handler(target: str) -> CustomCallHandler | None:
    """The `fn(inst, *operands)` handler of `target`, or None."""
    return _instruction_handlers.get(target)


def call_handler(handler: Callable[..., Any], target: str, operands: Sequence[Any],
                 kwargs: dict[str, Any] | None = None) -> Any:
    """Calls a Python custom-call handler on copies of its operands (a tuple
    operand as a tuple), so that it cannot change the caller's values; its
    own failure becomes an HloError naming the target."""
    args = [tuple(np.array(v, copy=True) for v in o) if isinstance(o, tuple)
            else np.array(o, copy=True) for o in operands]
    try:
        return handler(*args, **(kwargs or {}))
    except HloError:
        raise
    except Exception as e:  # the handler's own failure, named
        raise HloError(f"the handler of custom call target '{target}' "
                       f"failed: {type(e).__name__}: {e}") from e

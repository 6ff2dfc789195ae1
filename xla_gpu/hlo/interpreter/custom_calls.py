"""custom-call: XLA's own targets (TopK, the cuBLAS gemms, the cuDNN
convolutions, sharding annotations) evaluated here, and the Python
handlers registered in `xla_gpu.ffi.registry` (which win over a built-in
target of the same name); jaxlib's cpu targets are registered on a miss."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..convolution import CUDNN_CONV_TARGETS
from ..cublas import activation as cublas_activation
from ..cublas import cublas_gemm
from ..module import HloError
from ..shape import Shape
from .convolution import custom_cudnn_conv, in_type
from .dot import dot_general
from .dtypes import Value, down, etype_of
from .sort import custom_topk


def _custom_gemm(ev, inst, ops) -> Value:
    """XLA:GPU's cuBLAS custom calls (`__cublas$gemm`,
    `__cublas$lt$matmul`; see xla_gpu.hlo.cublas): D = act(alpha * dot(A,
    B) + beta * C + bias). The result is D, or a tuple (D, [pre-activation
    for *_AUX,] s8 workspace)."""
    target = inst.attrs.get("custom_call_target")
    gemm = cublas_gemm(inst)
    epilogue, beta, alpha = gemm.epilogue, gemm.beta, gemm.alpha
    has_bias, has_aux = gemm.epilogue_kind.bias, gemm.epilogue_kind.aux
    expected = gemm.operand_count
    if len(ops) != expected:
        raise HloError(f"{target}: {len(ops)} operands; beta={beta:g} and "
                       f"epilogue {epilogue} take {expected} (A, B"
                       f"{', C' if beta != 0 else ''}"
                       f"{', bias' if has_bias else ''})")
    leaves = inst.shape.leaves()
    out_shape = leaves[0]
    etype = out_shape.element_type
    acc = dot_general(np.asarray(ops[0]), np.asarray(ops[1]),
                      etype_of(inst, 0), etype_of(inst, 1), etype,
                      gemm.lhs_batch, gemm.rhs_batch,
                      gemm.lhs_contracting, gemm.rhs_contracting)
    if acc.shape != out_shape.dims:
        raise HloError(f"{target}: the product has shape {list(acc.shape)}, "
                       f"the result is {out_shape}")
    acc = acc * (alpha if etype in ("c64", "c128") else alpha.real)
    k = 2
    if beta != 0:
        c = np.asarray(ops[k])
        if c.shape != acc.shape:
            raise HloError(f"{target}: C has shape {list(c.shape)}, the "
                           f"result {out_shape}")
        acc = acc + beta * in_type(c, etype_of(inst, k), etype)
        k += 1
    if has_bias:
        bias = np.asarray(ops[k])
        bias = in_type(bias, etype_of(inst, k), etype)
        if bias.shape not in (acc.shape, acc.shape[-1:]):
            raise HloError(f"{target}: the bias has shape {list(bias.shape)}; "
                           f"expected [{acc.shape[-1]}] for {out_shape}")
        acc = acc + bias
    pre = acc
    acc = cublas_activation(acc, gemm.epilogue_kind.activation)
    results = [down(acc, etype)]
    if has_aux:
        if len(leaves) < 2:
            raise HloError(f"{target}: epilogue {epilogue} needs a result "
                           "tuple with the pre-activation output")
        results.append(down(pre, leaves[1].element_type))
    if not inst.shape.is_tuple:
        return results[0]
    for leaf in leaves[len(results):]:  # the workspace
        results.append(np.zeros(leaf.dims, leaf.dtype))
    if len(results) != len(leaves):
        raise HloError(f"{target}: the result {inst.shape} does not hold D"
                       f"{', the pre-activation' if has_aux else ''} and a "
                       "workspace")
    return tuple(results)


def _custom_identity(ev, inst, ops) -> Value:
    """Sharding annotations: on one device the value itself (the operands
    as a tuple for a shard_map edge of several values; nothing for a
    sharding group)."""
    target = inst.attrs.get("custom_call_target")
    shape = inst.shape
    if shape.is_tuple and not shape.tuple_shapes:
        return ()
    if len(ops) == 1 and not (shape.is_tuple and not inst.operands[0].shape.is_tuple):
        value = ops[0]
    elif shape.is_tuple and len(ops) == len(shape.tuple_shapes) > 1:
        value = tuple(ops)
    else:
        raise HloError(f"'{target}' takes one operand")
    return _result_like(value, shape, str(target))


def _is_sharding_annotation(target: str) -> bool:
    # Shardy's round-trip targets: annotations, on one device identities.
    return target.startswith("xla.sdy.")


# XLA's own targets, evaluated here unless a handler is registered for them.
_BUILTIN_CUSTOM_CALLS = {"TopK": custom_topk, "__cublas$gemm": _custom_gemm,
                         "__cublas$lt$matmul": _custom_gemm,
                         "Sharding": _custom_identity,
                         "SPMDFullToShardShape": _custom_identity,
                         "SPMDShardToFullShape": _custom_identity}
_BUILTIN_CUSTOM_CALLS.update({t: custom_cudnn_conv for t in CUDNN_CONV_TARGETS})


def _result_like(value: Any, shape: Shape, target: str,
                 where: str = "") -> Value:
    if shape.is_tuple:
        if value is None and not shape.tuple_shapes:
            return ()   # an effect with no result (the cpu runtime takes None too)
        if not isinstance(value, (tuple, list)) or \
                len(value) != len(shape.tuple_shapes):
            raise HloError(f"the handler of '{target}' returned "
                           f"{type(value).__name__}{where}; the result is "
                           f"{shape}")
        return tuple(_result_like(v, s, target, f"{where}[{i}]")
                     for i, (v, s) in enumerate(zip(value, shape.tuple_shapes)))
    arr = np.asarray(value)
    if arr.shape != shape.dims:
        raise HloError(f"the handler of '{target}' returned shape "
                       f"{list(arr.shape)}{where}; the result is {shape}")
    if arr.dtype != shape.dtype:
        if not np.can_cast(arr.dtype, shape.dtype, "same_kind"):
            raise HloError(f"the handler of '{target}' returned {arr.dtype}"
                           f"{where}; the result is {shape}")
        arr = arr.astype(shape.dtype)
    return arr


def _h_custom_call(ev, inst, ops, batch):
    target = inst.attrs.get("custom_call_target")
    if not isinstance(target, str) or not target:
        raise HloError("custom-call needs custom_call_target=\"...\"")
    # The registry sits above hlo (in xla_gpu.ffi): imported when a custom
    # call runs, so that the interpreter alone imports no FFI code.
    from ...ffi import registry
    handler = registry.custom_call_handler(target)
    with_inst = registry.instruction_handler(target) if handler is None else None
    if handler is None and with_inst is None and target not in _BUILTIN_CUSTOM_CALLS \
            and not _is_sharding_annotation(target):
        from ...ffi import jaxlib_targets   # jax's own cpu targets, from jaxlib
        jaxlib_targets.provide(target, "cpu")
        with_inst = registry.instruction_handler(target)
    if with_inst is not None:
        result = registry.call_handler(lambda *args: with_inst(inst, *args), target, ops)
        return _result_like(result, inst.shape, target)
    if handler is None and target in _BUILTIN_CUSTOM_CALLS:
        return _BUILTIN_CUSTOM_CALLS[target](ev, inst, ops)
    if handler is None and _is_sharding_annotation(target):
        return _custom_identity(ev, inst, ops)
    if handler is None:
        known = ", ".join(registry.registered_custom_calls()) or "none"
        from ...ffi import jaxlib_targets
        raise HloError(f"no handler for the custom call target '{target}' "
                       "(register one with xla_gpu.hlo.interpreter."
                       f"register_custom_call; registered: {known})"
                       f"{jaxlib_targets.missing_hint(target)}")
    from ...ffi.attributes import handler_attributes
    kwargs = handler_attributes(target, str(inst.attrs.get("api_version", "")),
                                inst.attrs.get("backend_config", ""))
    return _result_like(registry.call_handler(handler, target, ops, kwargs), inst.shape,
                        target)


def register_custom_call(target: str, fn: Callable[..., Any], *,
                         instruction: bool = False) -> None:
    """Makes `fn` the reference implementation of custom calls to `target`
    (`fn(*operands, **attributes)`; with `instruction=True`, `fn(inst,
    *operands)`): `xla_gpu.ffi.registry.register_custom_call`, where the
    handlers the interpreter and the cpu runtime run are kept."""
    from ...ffi import registry
    registry.register_custom_call(target, fn, instruction=instruction)


def unregister_custom_call(target: str) -> None:
    """Forgets the handler of `target` (no error when there is none)."""
    from ...ffi import registry
    registry.unregister_custom_call(target)


def registered_custom_calls() -> tuple[str, ...]:
    """The targets with a registered Python handler."""
    from ...ffi import registry
    return registry.registered_custom_calls()


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "custom-call": _h_custom_call,
}

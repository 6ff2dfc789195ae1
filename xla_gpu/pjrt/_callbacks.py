"""Python callbacks (jax.pure_callback, io_callback, jax.debug.print and
jax.debug.callback) in programs jax compiles for xla_gpu.

jax lowers a callback to a custom call naming an index into the host
callbacks it hands the compiler, and jaxlib gives those to a plugin's run
only on its own platforms (cpu, cuda, rocm, sycl): a PJRT plugin never
sees them. So on "xla_gpu" the callback is lowered here instead, to a
custom call `xla_gpu_python_callback` whose `callback_id` attribute names
the callable in this process's table; the runtime's handler (cpu target)
looks it up and calls it with numpy arrays. jax still gets the callable as
a host callback of the module, which keeps it alive as long as the
executable is, and which keeps such programs out of jax's persistent cache
(the id means something only in this process).

jax.experimental.buffer_callback, which jax lowers for cpu, cuda and rocm
only, is lowered here the same way for "xla_gpu" (`BUFFER_TARGET`): the
handler makes the results (an aliased one in its operand's memory) and
hands them to the callable as writeable buffers next to its read-only
operands.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["TARGET", "BUFFER_TARGET", "install"]

TARGET = "xla_gpu_python_callback"
# jax.experimental.buffer_callback: the callable gets buffers to fill.
BUFFER_TARGET = "xla_gpu_python_buffer_callback"

_lock = threading.Lock()
_ids = itertools.count(1)
# callback_id -> the checked callable; weak: jax's executable holds it.
_table: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()


def _checked(callback, result_avals):
    """`callback` with its results checked against what the program
    expects (count, shapes, dtypes), as numpy arrays."""
    from jax._src import dtypes

    def call(*args):
        outs = callback(*args)
        if len(outs) != len(result_avals):
            raise RuntimeError(f"the Python callback returned {len(outs)} values, the "
                               f"program expects {len(result_avals)}")
        checked = []
        for i, (value, aval) in enumerate(zip(outs, result_avals)):
            # (Python scalars and 64-bit values as jax canonicalizes them)
            array = np.asarray(dtypes.canonicalize_value(np.asarray(value)))
            if array.shape != tuple(aval.shape):
                raise RuntimeError(f"the Python callback's result {i} has shape "
                                   f"{array.shape}, the program expects {tuple(aval.shape)}")
            if array.dtype != aval.dtype:
                raise RuntimeError(f"the Python callback's result {i} has dtype "
                                   f"{array.dtype}, the program expects {aval.dtype}")
            checked.append(array)
        return tuple(checked)
    return call


def _lookup(callback_id, what: str):
    """The callable a program's custom call names."""
    with _lock:
        callback = _table.get(int(callback_id))
    if callback is None:
        raise RuntimeError(f"{what} {int(callback_id)} is no longer alive in this process "
                           "(its jax executable was deleted)")
    return callback


def _run(*operands, callback_id, with_token=False):
    """The runtime's handler: the registered callable on the operands (a
    token operand first when the program threads one through)."""
    callback = _lookup(callback_id, "Python callback")
    if with_token:
        token, *args = operands
        return (token, *callback(*args))
    outs = callback(*operands)
    return outs[0] if len(outs) == 1 else outs


def install(platform: str) -> None:
    """Lowers jax's Python callbacks on `platform` here (jax 0.10.x's
    private `emit_python_callback`), and registers the runtime handler."""
    from jax._src import callback as jax_callback
    from ..ffi.registry import register_custom_call
    register_custom_call(TARGET, _run)
    register_custom_call(BUFFER_TARGET, _run_buffers)
    _install_buffer_callback(platform)
    original = jax_callback.emit_python_callback
    if getattr(original, "_xla_gpu", False):
        return

    def emit_python_callback(ctx, callback, token, operands, operand_avals, result_avals, *,
                             has_side_effect, returns_token=True, partitioned=False,
                             sharding=None):
        if list(ctx.module_context.platforms) != [platform]:
            return original(ctx, callback, token, operands, operand_avals, result_avals,
                            has_side_effect=has_side_effect, returns_token=returns_token,
                            partitioned=partitioned, sharding=sharding)
        return _lower(ctx, callback, token, operands, result_avals, has_side_effect,
                      partitioned, sharding)

    emit_python_callback._xla_gpu = True
    jax_callback.emit_python_callback = emit_python_callback


def _lower(ctx, callback, token, operands, result_avals, has_side_effect: bool,
           partitioned: bool, sharding):
    import dataclasses
    from jax._src import core, ffi
    from jax._src.interpreters import mlir
    from . import _plugin
    if _plugin._CUDA is not None:
        raise NotImplementedError("Python callbacks (pure_callback, io_callback, "
                                  "jax.debug.print) run on xla_gpu's cpu target only; this "
                                  "client runs the cuda target")
    if partitioned and result_avals:
        raise ValueError("Partitioned callback not supported with return values.")
    checked = _checked(callback, result_avals)
    with _lock:
        callback_id = next(_ids)
        _table[callback_id] = checked
    ctx.module_context.add_host_callback(checked)
    if token:
        sharding = _with_token_sharding(sharding, has_results=bool(ctx.avals_out))
        operands = [token, *operands]
        ctx = dataclasses.replace(ctx, avals_in=[core.abstract_token, *ctx.avals_in],
                                  avals_out=[core.abstract_token, *ctx.avals_out])
    op = ffi.build_ffi_lowering_function(TARGET, has_side_effect=has_side_effect)(
        ctx, *operands, callback_id=np.uint64(callback_id), with_token=bool(token))
    if sharding is not None:
        mlir.set_sharding(ctx.module_context, op, sharding)
        if not op.results:
            _state_hlo_sharding(op, sharding)
    results = list(op.results)
    if token:
        token, *results = results
    return results, token, checked


def _with_token_sharding(sharding, has_results: bool):
    """Shardy wants one sharding per result: the token result that goes
    first gets one on the same devices (a callback with no other result
    has the one it was given already)."""
    from jax._src import config
    from jax._src.sharding_impls import SdyArray, SdyArrayList
    if not (has_results and config.use_shardy_partitioner.value and
            isinstance(sharding, SdyArrayList)):
        return sharding
    devices = sharding.shardings[0].logical_device_ids
    token = SdyArray(mesh_shape=(), dim_shardings=(), logical_device_ids=devices)
    return SdyArrayList((token, *sharding.shardings))


def _state_hlo_sharding(op, sharding) -> None:
    """A callback with no result (jax.debug.print, an unordered
    io_callback) keeps its Shardy sharding only in the StableHLO: its HLO
    text, which xla_gpu partitions, gets none, and a side effect without
    one is refused by XLA's partitioner. So the HLO form is stated too."""
    from jax._src.lib.mlir import ir
    from jax._src.sharding_impls import SdyArrayList
    if isinstance(sharding, SdyArrayList):
        first = sharding.shardings[0]
        devices = first.logical_device_ids
        if first.mesh_shape == () and devices is not None and len(devices) == 1:
            text = f"{{maximal device={int(devices[0])}}}"
        else:
            return
    elif hasattr(sharding, "SerializeToString"):
        from jax._src.lib import xla_client
        text = str(xla_client.HloSharding.from_proto(sharding))
    else:
        return
    op.attributes["mhlo.sharding"] = ir.StringAttr.get(text)


# ----------------------------------------------------------------------------- buffer_callback
class HostBuffer:
    """What a buffer_callback's callable gets for each operand and result
    on the cpu target (jaxlib's `Buffer` surface): shape, dtype,
    writeable, and the memory through numpy (`np.asarray`) and DLPack.
    The operands are read only; the results are filled in place."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray, writeable: bool):
        view = array.view()
        view.flags.writeable = writeable
        self._array = view

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> np.dtype:
        return self._array.dtype

    @property
    def writeable(self) -> bool:
        return bool(self._array.flags.writeable)

    def __array__(self, dtype=None, copy=None):
        if copy:
            return np.array(self._array, dtype=dtype, copy=True)
        return self._array if dtype is None else self._array.astype(dtype, copy=False)

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def __repr__(self) -> str:
        return f"HostBuffer(shape={self.shape}, dtype={self.dtype}, writeable={self.writeable})"


class HostExecutionContext:
    """A buffer_callback's context on the cpu target: the execute stage,
    and no GPU stream (as jaxlib's cpu context)."""

    @property
    def stage(self):
        from jax._src.lib import ffi as ffi_lib
        return ffi_lib.ExecutionStage.EXECUTE

    @property
    def stream(self):
        from jax.errors import JaxRuntimeError
        raise JaxRuntimeError("XLA FFI GPU context is not available (xla_gpu's cpu target)")


def _run_buffers(*operands, callback_id):
    """The runtime's handler of a buffer_callback: its results made (the
    aliased ones from their operands' values), handed to the callable
    with the operands, and returned."""
    outs = _lookup(callback_id, "buffer_callback")(*operands)
    return outs[0] if len(outs) == 1 else tuple(outs)


class _BufferCall:
    """One lowered buffer_callback: the callable, its trees, the results'
    types and which operand each aliased result starts from."""

    def __init__(self, callback, in_tree, out_tree, result_avals, aliases: dict[int, int]):
        from jax._src import tree_util
        self.unflatten = tree_util.tree_unflatten
        self.callback, self.in_tree, self.out_tree = callback, in_tree, out_tree
        self.result_avals = result_avals
        self.source = {out: arg for arg, out in aliases.items()}

    def __call__(self, *operands):
        results = []
        for k, aval in enumerate(self.result_avals):
            arg = self.source.get(k)
            if arg is not None:
                operand = np.asarray(operands[arg])
                # The runtime hands an aliased operand over in the result's
                # own memory: filled in place, as XLA does.
                results.append(operand if operand.flags.writeable else
                               np.array(operand, copy=True))
            else:
                results.append(np.zeros(aval.shape, aval.dtype))
        args = [HostBuffer(np.asarray(o), False) for o in operands]
        outs = [HostBuffer(r, True) for r in results]
        py_args, py_kwargs = self.unflatten(self.in_tree, args)
        py_outs = self.unflatten(self.out_tree, outs)
        if self.callback(HostExecutionContext(), py_outs, *py_args, **py_kwargs) is not None:
            raise ValueError("buffer_callback callback must not return any values.")
        return results


def _install_buffer_callback(platform: str) -> None:
    """jax lowers buffer_callback for cpu, cuda and rocm only: `platform`'s
    lowering is this one (the cpu target; the cuda target refuses it)."""
    try:
        from jax._src import buffer_callback as jax_buffer_callback
        from jax._src.interpreters import mlir
    except ImportError:   # a jax without buffer_callback
        return

    def lower(ctx, *args, callback, in_tree, out_tree, has_side_effect,
              input_output_aliases, **_):
        from jax._src import ffi
        from . import _plugin
        if _plugin._CUDA is not None:
            raise NotImplementedError("buffer_callback runs on xla_gpu's cpu target only; this "
                                      "client runs the cuda target")
        aliases = dict(input_output_aliases)
        call = _BufferCall(callback, in_tree, out_tree, list(ctx.avals_out), aliases)
        with _lock:
            callback_id = next(_ids)
            _table[callback_id] = call
        ctx.module_context.add_host_callback(call)
        rule = ffi.ffi_lowering(BUFFER_TARGET, has_side_effect=has_side_effect,
                                operand_output_aliases=aliases)
        return rule(ctx, *args, callback_id=np.uint64(callback_id))

    mlir.register_lowering(jax_buffer_callback.buffer_callback_p, lower, platform=platform)

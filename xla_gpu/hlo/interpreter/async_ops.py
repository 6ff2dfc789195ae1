"""The pairs of XLA:GPU's scheduled dumps (async-start / -update / -done,
copy-start / -done: run at the start op; an async-start wrapping a
collective meets its peers there), and ops with nothing to compute (after-all,
get-dimension-size, and replica-id / partition-id: the device's ids)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..module import HloComputation, HloError
from ..shape import Shape


def _context_leaves(shapes: Sequence[Shape]) -> tuple:
    return tuple(np.zeros(s.dims, s.dtype) if not s.is_tuple
                 else _context_leaves(s.tuple_shapes) for s in shapes)


def _h_async_start(ev, inst, ops, batch):
    """async-start runs its computation at once: the value is (operands,
    result, context), as XLA's async shape spells it."""
    comp = inst.attrs.get("calls")
    if isinstance(comp, list) and len(comp) == 1:
        comp = comp[0]
    if not isinstance(comp, HloComputation):
        raise HloError("async-start needs calls=<computation>")
    shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else []
    if len(shapes) < 2:
        raise HloError(f"async-start's shape {inst.shape} is not (operands, "
                       "result, context...)")
    result = ev.run(comp, ops)
    return (tuple(ops), result) + _context_leaves(shapes[2:])


def _h_async_update(ev, inst, ops, batch):
    return ops[0]


def _h_async_done(ev, inst, ops, batch):
    state = ops[0]
    if not isinstance(state, tuple) or len(state) < 2:
        raise HloError("async-done needs the value of an async-start")
    return state[1]


def _h_copy_start(ev, inst, ops, batch):
    """copy-start: (destination, source, context); the copy is immediate."""
    shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else []
    if len(shapes) < 2:
        raise HloError(f"copy-start's shape {inst.shape} is not "
                       "(destination, source, context)")
    return (np.array(ops[0], copy=True), ops[0]) + \
        _context_leaves(shapes[2:])


def _h_first_element(ev, inst, ops, batch):
    state = ops[0]
    if not isinstance(state, tuple) or not state:
        raise HloError(f"{inst.opcode} needs the tuple of its start op")
    return state[0]


def _h_get_dimension_size(ev, inst, ops, batch):
    dims = inst.attrs.get("dimensions", ())
    x = np.asarray(ops[0])
    if not isinstance(dims, tuple) or len(dims) != 1 or \
            not 0 <= dims[0] < x.ndim:
        raise HloError(f"get-dimension-size needs dimensions={{d}} with "
                       f"0 <= d < {x.ndim}")
    return np.asarray(x.shape[dims[0]], inst.shape.dtype)


def _h_device_id(ev, inst, ops, batch):
    """replica-id / partition-id: the evaluating device's (0 and 0 under
    `evaluate`, one device)."""
    value = ev.replica_id if inst.opcode == "replica-id" else ev.partition_id
    return np.asarray(value, inst.shape.dtype)


def _h_after_all(ev, inst, ops, batch):
    return np.zeros((0,), np.uint8)


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "after-all": _h_after_all,
    "async-start": _h_async_start,
    "async-update": _h_async_update,
    "async-done": _h_async_done,
    "copy-start": _h_copy_start,
    "copy-done": _h_first_element,
    "get-dimension-size": _h_get_dimension_size,
    "replica-id": _h_device_id,
    "partition-id": _h_device_id,
}

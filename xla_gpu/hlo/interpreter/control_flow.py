"""call / fusion, map, while and conditional: evaluations of the called
computations."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..module import HloComputation, HloError


def _h_call(ev, inst, ops, batch):
    key = "calls" if inst.opcode == "fusion" else "to_apply"
    comp = inst.attrs.get(key)
    if not isinstance(comp, HloComputation):
        raise HloError(f"'{inst.opcode}' needs {key}=<computation>")
    return ev.run(comp, ops, batch)


def _h_map(ev, inst, ops, batch):
    comp = inst.attrs["to_apply"]
    if batch is not None:
        return ev.run(comp, ops, batch)
    return ev.apply(comp, [np.asarray(o) for o in ops], inst.shape.dims)


def _h_while(ev, inst, ops, batch):
    cond = inst.attrs.get("condition")
    body = inst.attrs.get("body")
    if not isinstance(cond, HloComputation) or \
            not isinstance(body, HloComputation):
        raise HloError("while needs condition= and body=")
    state = ops[0]
    while bool(np.asarray(ev.run(cond, [state]))):
        state = ev.run(body, [state])
    return state


def _h_conditional(ev, inst, ops, batch):
    selector = np.asarray(ops[0])
    if selector.dtype == np.bool_:
        branches = [inst.attrs.get("true_computation"),
                    inst.attrs.get("false_computation")]
        index = 0 if bool(selector) else 1
        if not all(isinstance(b, HloComputation) for b in branches):
            branches = inst.attrs.get("branch_computations")
    else:
        branches = inst.attrs.get("branch_computations")
        index = int(selector.astype(np.int64))
    if not branches:
        raise HloError("conditional needs its branch computations")
    if not 0 <= index < len(branches):
        index = len(branches) - 1
    return ev.run(branches[index], [ops[1 + index]])


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "call": _h_call,
    "fusion": _h_call,
    "map": _h_map,
    "while": _h_while,
    "conditional": _h_conditional,
}

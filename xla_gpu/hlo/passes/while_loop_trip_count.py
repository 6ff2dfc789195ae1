"""WhileLoopTripCountAnnotator (XLA's, with its pattern-matched trip count):
a while loop whose trip count is known at compile time gets it in its
backend config, `{"known_trip_count": {"n": "N"}}`, beside the induction
variable and its start and step (`known_induction_variable`,
`known_init_step`), as XLA prints them.

The loop the pattern knows, the form of jax's fori_loop and scan: an
integer induction variable (the loop state, or one element of its tuple)

* starts at a constant (the while's operand, or that element of the tuple
  it is made from),
* grows by a nonzero constant each iteration (the body's root, or that
  element of its root tuple, is `add(state[k], constant)`; nothing else
  writes it), and
* is compared with a constant by the condition's root (LT, LE, GT, GE or
  NE, either side).

The runtime then runs the body N times without the condition: on a GPU
that saves each iteration's copy of the predicate to the host and the wait
for it, as XLA's WhileThunk does with a known trip count. A loop that would
not stop, or whose variable would wrap around before it stops, gets no
count.
"""

from __future__ import annotations

import json

from ..module import HloComputation, HloInstruction, HloModule
from ..shape import bit_width, is_integral
from .algebraic_simplifier import scalar_constant_value
from .pipeline import HloPass
from .util import program_computations

__all__ = ["WhileLoopTripCountAnnotator", "while_trip_count"]

_FLIPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE"}


def _constant_int(inst: HloInstruction) -> int | None:
    """The value of a scalar integer constant; None otherwise."""
    if inst.shape.is_tuple or not is_integral(inst.shape.element_type) or \
            inst.shape.num_elements != 1:
        return None
    value = scalar_constant_value(inst)
    return None if value is None else int(value)


def _state_element(inst: HloInstruction, param: HloInstruction, index: int | None) -> bool:
    """Whether `inst` reads element `index` of the loop state `param` (the
    state itself when it is no tuple)."""
    if index is None:
        return inst is param
    return inst.opcode == "get-tuple-element" and inst.operands[0] is param and \
        inst.attrs.get("index") == index


def _compared_element(cond: HloComputation) -> tuple[int | None, str, int] | None:
    """(state element, direction with the element on the left, limit) of a
    condition whose root compares one state element with a constant."""
    root = cond.root
    if root is None or root.opcode != "compare" or len(root.operands) != 2 or \
            not cond.parameters:
        return None
    direction = str(root.attrs.get("direction", ""))
    if direction not in _FLIPPED:
        return None
    param = cond.parameters[0]
    for side, other, d in ((0, 1, direction), (1, 0, _FLIPPED[direction])):
        value, limit = root.operands[side], _constant_int(root.operands[other])
        if limit is None:
            continue
        if param.shape.is_tuple and value.opcode == "get-tuple-element" and \
                value.operands[0] is param:
            return value.attrs.get("index"), d, limit
        if not param.shape.is_tuple and value is param:
            return None, d, limit
    return None


def _step(body: HloComputation, index: int | None) -> int | None:
    """The constant the body adds to state element `index`, when the new
    value is exactly that sum."""
    root, param = body.root, body.parameters[0] if body.parameters else None
    if root is None or param is None:
        return None
    if index is not None:
        if root.opcode != "tuple" or index >= len(root.operands):
            return None
        update = root.operands[index]
    else:
        update = root
    if update.opcode != "add" or len(update.operands) != 2:
        return None
    for value, constant in (update.operands, update.operands[::-1]):
        step = _constant_int(constant)
        if step is not None and _state_element(value, param, index):
            return step
    return None


def _start(loop: HloInstruction, index: int | None) -> int | None:
    init = loop.operands[0]
    if index is None:
        return _constant_int(init)
    if init.opcode != "tuple" or index >= len(init.operands):
        return None
    return _constant_int(init.operands[index])


def _count(start: int, step: int, direction: str, limit: int) -> int | None:
    """Iterations of `for (i = start; i <direction> limit; i += step)`;
    None when it does not stop."""
    holds = {"LT": lambda i: i < limit, "LE": lambda i: i <= limit,
             "GT": lambda i: i > limit, "GE": lambda i: i >= limit,
             "NE": lambda i: i != limit}[direction]
    if not holds(start):
        return 0
    if direction == "NE":
        if (limit - start) % step or (limit - start) // step <= 0:
            return None
        return (limit - start) // step
    if (direction in ("LT", "LE")) != (step > 0):
        return None                          # moves away from the limit
    span = limit - start + (1 if direction == "LE" else -1 if direction == "GE" else 0)
    return -(-span // step)                  # ceil(span / step), span and step of one sign


def while_trip_count(loop: HloInstruction) -> tuple[int | None, int, int, int] | None:
    """(state element, start, step, trip count) of a while loop of the
    pattern (see the module text); None for any other loop."""
    cond, body = loop.attrs.get("condition"), loop.attrs.get("body")
    if not isinstance(cond, HloComputation) or not isinstance(body, HloComputation) or \
            len(loop.operands) != 1:
        return None
    compared = _compared_element(cond)
    if compared is None:
        return None
    index, direction, limit = compared
    state = loop.operands[0].shape
    element = state.tuple_shapes[index] if index is not None and state.is_tuple and \
        index < len(state.tuple_shapes) else state
    if element.is_tuple or not is_integral(element.element_type) or element.rank != 0:
        return None
    step, start = _step(body, index), _start(loop, index)
    if not step or start is None:
        return None
    count = _count(start, step, direction, limit)
    if count is None:
        return None
    # The values the variable takes, the last (which ends the loop)
    # included, must fit its type: a wrapped-around value would compare
    # differently.
    bits = bit_width(element.element_type)
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) \
        if element.element_type.startswith("s") else (0, (1 << bits) - 1)
    if not (low <= start <= high and low <= start + count * step <= high):
        return None
    return index, start, step, count


class WhileLoopTripCountAnnotator(HloPass):
    name = "while-loop-trip-count-annotator"

    def run(self, module: HloModule) -> bool:
        changed = False
        for comp in program_computations(module):
            for loop in comp.instructions:
                if loop.opcode != "while":
                    continue
                config = loop.backend_config()
                if "known_trip_count" in config:
                    continue
                found = while_trip_count(loop)
                if found is None:
                    continue
                index, start, step, count = found
                config = dict(config)
                config["known_trip_count"] = {"n": str(count)}
                if index is not None:
                    config["known_induction_variable"] = {"tuple_index": str(index)}
                config["known_init_step"] = {"init": str(start), "step": str(step)}
                loop.attrs["backend_config"] = json.dumps(config, separators=(",", ":"))
                changed = True
        return changed

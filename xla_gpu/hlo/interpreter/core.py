"""The evaluator: walks a computation in post order and hands each
instruction to the handler of its opcode (`HANDLERS`, gathered from the
modules that evaluate the ops), checking every result's size before and its
shape after."""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Callable, Sequence

import numpy as np

from ..graph import post_order
from ..module import HloComputation, HloError, HloInstruction
from ..opcodes import has_side_effect
from ..shape import Shape
from . import (async_ops, collective_ops, control_flow, convolution, custom_calls,
               data_movement, dot, elementwise, fft, reductions, rng, sort)
from .dtypes import MAX_ELEMENTS, Value
from .elementwise import BATCHABLE


class Evaluator:
    """Evaluates computations on one device. `evaluate` uses it as the only
    device (replica 0, partition 0, no rendezvous: a collective has one
    participant); `evaluate_devices` gives each device its ids and the
    run's rendezvous (`session`)."""

    device: int = 0
    replica_id: int = 0
    partition_id: int = 0
    num_replicas: int = 1
    num_partitions: int = 1
    session = None

    def __init__(self) -> None:
        self._scalar_cache: dict[int, bool] = {}
        self._effects: dict[int, list[HloInstruction]] = {}
        self._executions: dict[int, int] = {}

    def next_execution(self, inst: HloInstruction) -> int:
        """How many times this evaluator ran `inst` before (0 the first
        time), counting this run: a collective in a loop body meets its
        peers once per iteration."""
        count = self._executions.get(id(inst), 0)
        self._executions[id(inst)] = count + 1
        return count

    # -- computations

    def run(self, comp: HloComputation, args: Sequence[Value],
            batch: tuple[int, ...] | None = None) -> Value:
        """Evaluates `comp`. With `batch`, comp is a scalar computation and
        every argument stands for an array of that shape of scalars."""
        values: dict[int, Value] = {}
        params = comp.parameters
        if len(args) != len(params):
            raise HloError(f"computation '{comp.name}' takes {len(params)} "
                           f"arguments, got {len(args)}")
        for p, a in zip(params, args):
            values[id(p)] = a
        for inst in post_order([comp.root, *self._unread_effects(comp)],
                               attrgetter("operands")):
            if inst.opcode == "parameter":
                if id(inst) not in values:
                    raise inst.error("parameter was not given a value")
                continue
            operands = [values[id(o)] for o in inst.operands]
            values[id(inst)] = self.eval_instruction(inst, operands, batch)
        result = values[id(comp.root)]
        if batch is not None:
            result = _broadcast_leaves(result, batch)
        return result

    def _unread_effects(self, comp: HloComputation) -> list[HloInstruction]:
        """What `comp` runs although nothing reads it: side effects with no
        user (a jax.debug.print; a conditional whose branch prints)."""
        found = self._effects.get(id(comp))
        if found is None:
            found = self._effects[id(comp)] = [
                i for i in comp.instructions
                if not i.users and i is not comp.root and has_side_effect(i)]
        return found

    def is_scalar_computation(self, comp: HloComputation) -> bool:
        key = id(comp)
        if key not in self._scalar_cache:
            self._scalar_cache[key] = False  # recursion guard
            ok = True
            for inst in comp.instructions:
                if any(leaf.rank for leaf in inst.shape.leaves()) or \
                        inst.opcode not in BATCHABLE:
                    ok = False
                    break
                for called in inst.called_computations:
                    if not self.is_scalar_computation(called):
                        ok = False
                if not ok:
                    break
            self._scalar_cache[key] = ok
        return self._scalar_cache[key]

    def apply(self, comp: HloComputation, args: Sequence[Value],
              batch: tuple[int, ...]) -> Value:
        """Applies a scalar computation to arrays of `batch` shape, element
        by element (batched when possible, a loop otherwise)."""
        if self.is_scalar_computation(comp):
            return self.run(comp, args, batch)
        count = math.prod(batch)
        results = []
        for i in range(count):
            idx = np.unravel_index(i, batch) if batch else ()
            scalar_args = [_index_leaves(a, idx) for a in args]
            results.append(self.run(comp, scalar_args))
        shape = comp.root.shape
        return _stack_results(results, shape, batch)

    # -- instructions

    def eval_instruction(self, inst: HloInstruction, ops: list[Value],
                         batch: tuple[int, ...] | None) -> Value:
        handler = HANDLERS.get(inst.opcode)
        if handler is None:
            raise inst.unsupported(f"opcode '{inst.opcode}' is not supported by the "
                             "reference interpreter")
        for leaf in inst.shape.leaves():
            count = leaf.num_elements * (math.prod(batch) if batch else 1)
            if count > MAX_ELEMENTS:
                raise inst.error(f"the result {leaf} holds {count} elements, "
                                 f"more than the interpreter's limit of "
                                 f"{MAX_ELEMENTS}")
        try:
            value = handler(self, inst, ops, batch)
        except HloError as e:
            if "instruction '" in str(e):
                raise
            raise inst.error(str(e)) from e
        except (ValueError, IndexError, TypeError, KeyError, OverflowError,
                ZeroDivisionError, AttributeError, MemoryError) as e:
            raise inst.error(f"evaluation failed: {type(e).__name__}: {e}") \
                from e
        if batch is None:
            _check_value(inst, value, inst.shape)
        return value


def _check_value(inst: HloInstruction, value: Value, shape: Shape) -> None:
    if shape.is_tuple:
        if not isinstance(value, tuple) or \
                len(value) != len(shape.tuple_shapes):
            raise inst.error(f"computed a value that is not {shape} "
                             "(an inconsistent module?)")
        for v, s in zip(value, shape.tuple_shapes):
            _check_value(inst, v, s)
        return
    if shape.element_type == "token":
        return
    if not isinstance(value, np.ndarray) or value.shape != shape.dims or \
            value.dtype != shape.dtype:
        got = f"{getattr(value, 'dtype', type(value).__name__)}" \
              f"{list(getattr(value, 'shape', ()))}"
        raise inst.error(f"computed {got}, but the instruction's shape is "
                         f"{shape} (an inconsistent module?)")


def _broadcast_leaves(value: Value, batch: tuple[int, ...]) -> Value:
    if isinstance(value, tuple):
        return tuple(_broadcast_leaves(v, batch) for v in value)
    return np.broadcast_to(np.asarray(value), batch)


def _index_leaves(value: Value, idx) -> Value:
    if isinstance(value, tuple):
        return tuple(_index_leaves(v, idx) for v in value)
    return np.asarray(np.asarray(value)[idx])


def _stack_results(results: list, shape: Shape, batch: tuple[int, ...]):
    if shape.is_tuple:
        return tuple(_stack_results([r[i] for r in results], s, batch)
                     for i, s in enumerate(shape.tuple_shapes))
    out = np.empty(batch + shape.dims, shape.dtype)
    for i, r in enumerate(results):
        idx = np.unravel_index(i, batch) if batch else ()
        out[idx] = r
    return out


# Every opcode the interpreter evaluates, by handler: handler(evaluator,
# instruction, operand values, batch) -> value.
HANDLERS: dict[str, Callable] = {}
for _part in (elementwise, data_movement, reductions, control_flow, dot, sort, custom_calls,
              convolution, rng, fft, async_ops, collective_ops):
    HANDLERS.update(_part.HANDLERS)
del _part

SUPPORTED_OPCODES = frozenset(HANDLERS) | {"parameter"}

"""The collectives: all-reduce, all-gather, reduce-scatter, all-to-all,
ragged-all-to-all, collective-permute, collective-broadcast, and the async pairs XLA prints
(all-reduce-start / -done, all-gather-start / -done, collective-permute-start
/ -done: the work is done at the start op).

Each device's evaluator finds the devices it meets (`xla_gpu.hlo.collectives`)
and hands its operands to the rendezvous of its run (`ev.session`, see
`devices`): the last participant to arrive computes every participant's
share. Without a session (`evaluate`, one device) a collective has a single
participant, the device itself: every collective is the identity (a
collective-permute included: the one device is its own source)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import collectives as C
from ..module import HloComputation, HloError


def _combine(ev, inst) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The reducer applied element by element to two arrays."""
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, HloComputation):
        raise HloError(f"'{inst.opcode}' needs to_apply=<computation>")

    def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        value = ev.apply(comp, [a, b], a.shape)
        if isinstance(value, tuple):
            raise HloError(f"the reducer '{comp.name}' returns a tuple; an all-reduce "
                           "reducer combines two scalars into one")
        return np.array(value, copy=True)
    return combine


def _dimension(inst, opcode: str) -> int:
    d = C.collective_dimension(inst, opcode)
    if d is None:
        raise HloError(f"'{opcode}' needs dimensions={{d}}")
    return d


def _participants(ev, inst, opcode: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the global ids of the devices this one meets, in group order; the
    ids the collective's attributes name them by)."""
    R, P, device = ev.num_replicas, ev.num_partitions, ev.device
    mode = C.group_mode(inst)
    if opcode == "collective-permute":
        # Every device of the replica (cross-partition) or of the partition
        # (cross-replica) runs the permute; the pairs name them by that id.
        replica, partition = divmod(device, P)
        if mode is C.GroupMode.CROSS_PARTITION:
            return tuple(replica * P + p for p in range(P)), tuple(range(P))
        return tuple(r * P + partition for r in range(R)), tuple(range(R))
    groups = C.instruction_groups(inst)
    try:
        group = C.participating_devices(groups, mode, device, R, P)
    except HloError as e:
        raise inst.error(str(e)) from None
    return group, group


def _compute(ev, inst, opcode: str, entries: list[list[np.ndarray]],
             ids: tuple[int, ...]) -> list[list[np.ndarray]]:
    """Every participant's result leaves, in group order."""
    if opcode == "all-reduce":
        return C.all_reduce(entries, _combine(ev, inst))
    if opcode == "all-gather":
        return C.all_gather(entries, _dimension(inst, opcode))
    if opcode == "reduce-scatter":
        return C.reduce_scatter(entries, _dimension(inst, opcode), _combine(ev, inst))
    if opcode == "all-to-all":
        if "dimensions" in inst.attrs:
            if any(len(e) != 1 for e in entries):
                raise HloError("all-to-all with dimensions={d} takes one operand")
            return [[r] for r in C.all_to_all([e[0] for e in entries],
                                              _dimension(inst, opcode))]
        return C.all_to_all_tuple(entries)
    if opcode == "collective-permute":
        if len(ids) == 1 and ev.session is None:
            return [[np.array(v, copy=True) for v in entries[0]]]
        pairs = C.parse_source_target_pairs(inst.attrs.get("source_target_pairs", "{}"))
        return C.collective_permute(entries, ids, pairs)
    if opcode == "collective-broadcast":
        return C.collective_broadcast(entries)
    if opcode == "ragged-all-to-all":
        return [[r] for r in C.ragged_all_to_all(entries)]
    raise HloError(f"'{opcode}' is not a collective")


def _exchange(ev, inst, opcode: str, operands: list[np.ndarray]) -> list[np.ndarray]:
    """This device's result leaves."""
    if opcode == "collective-permute" and "slice_sizes" in inst.attrs:
        raise inst.unsupported("the in-place collective-permute (input, output and "
                               "start indices) is not supported by the reference "
                               "interpreter")
    session = ev.session
    if session is None:
        return _compute(ev, inst, opcode, [operands], (0,))[0]
    group, ids = _participants(ev, inst, opcode)

    def compute(entries: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        return _compute(ev, inst, opcode, entries, ids)
    return session.meet(ev, inst, group, operands, compute)


def _leaves(inst, ops) -> list[np.ndarray]:
    out = []
    for k, value in enumerate(ops):
        if isinstance(value, tuple):
            raise HloError(f"operand {k} of '{inst.opcode}' is a tuple; collectives take "
                           "arrays")
        out.append(np.asarray(value))
    return out


def _pack(leaves: list[np.ndarray], many: bool):
    return tuple(leaves) if many else leaves[0]


def _h_collective(ev, inst, ops, batch):
    if batch is not None:
        raise HloError(f"'{inst.opcode}' cannot run inside a computation applied element "
                       "by element")
    operands = _leaves(inst, ops)
    opcode = C.ASYNC_COLLECTIVE_STARTS.get(inst.opcode, inst.opcode)
    result = _exchange(ev, inst, opcode, operands)
    shape = inst.shape
    if inst.opcode in ("all-reduce", "all-reduce-start", "all-gather", "reduce-scatter",
                       "collective-permute", "collective-broadcast", "ragged-all-to-all"):
        return _pack(result, shape.is_tuple)
    if inst.opcode == "all-to-all":
        return _pack(result, "dimensions" not in inst.attrs or shape.is_tuple)
    # all-gather-start: (operands, results); collective-permute-start:
    # (operands, results, context...).
    parts = shape.tuple_shapes if shape.is_tuple else ()
    if len(parts) < 2:
        raise HloError(f"{inst.opcode}'s shape {shape} is not (operands, results, ...)")
    many = parts[1].is_tuple
    return (_pack(operands, many), _pack(result, many)) + tuple(_zeros(s) for s in parts[2:])


def _zeros(shape):
    """The value of a context element of an async start's shape."""
    if shape.is_tuple:
        return tuple(_zeros(s) for s in shape.tuple_shapes)
    if shape.element_type == "token":
        return np.zeros((0,), np.uint8)
    return np.zeros(shape.dims, shape.dtype)


def _h_done_of_pair(ev, inst, ops, batch):
    state = ops[0]
    if not isinstance(state, tuple) or len(state) < 2:
        raise HloError(f"{inst.opcode} needs the value of its start op")
    return state[1]


def _h_all_reduce_done(ev, inst, ops, batch):
    return ops[0]


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    **{op: _h_collective for op in C.COLLECTIVE_OPCODES},
    "all-reduce-done": _h_all_reduce_done,
    "all-gather-done": _h_done_of_pair,
    "collective-permute-done": _h_done_of_pair,
}

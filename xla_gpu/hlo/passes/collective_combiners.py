"""AllReduceCombiner, AllGatherCombiner, ReduceScatterCombiner: independent
collectives of one kind that meet the same devices the same way become one
variadic collective, as XLA:GPU combines them after fusion.

A data-parallel training step all-reduces every gradient separately; each
collective is a rendezvous of all devices (a NCCL launch on GPUs, a meeting
of the emulated devices' threads on the cpu target), so one collective of
many operands costs one meeting instead of many. Two collectives combine
when they agree on what a participant does with its operand (the same
reduction and element type, the same gathered or scattered dimension), on
who takes part (replica groups, channel id or not, global device ids) and
when neither depends on the other (see `_groups`: candidates are grouped
by how many collectives lie above them, which keeps every combination free
of cycles). A group is closed when the next candidate would push it over
the byte or operand-count threshold (XLA:GPU's defaults: 30 MiB and 256
operands).

The combined collective has a tuple result; each original becomes a
get-tuple-element of it. Only array-shaped collectives are candidates, so a
combined one is never combined again.
"""

from __future__ import annotations

from typing import Any

from ...errors import HloError
from .. import collectives as C
from ..interpreter.reductions import simple_binary
from ..module import HloComputation, HloInstruction
from ..shape import Shape, bit_width
from .pipeline import ComputationPass

__all__ = ["AllReduceCombiner", "AllGatherCombiner", "ReduceScatterCombiner",
           "DEFAULT_COMBINE_BYTES", "DEFAULT_COMBINE_COUNT"]

DEFAULT_COMBINE_BYTES = 30 * 1024 * 1024
DEFAULT_COMBINE_COUNT = 256


def _nbytes(shape: Shape) -> int:
    count = 1
    for d in shape.dims:
        count *= d
    return -(-count * bit_width(shape.element_type) // 8)


class _CollectiveCombiner(ComputationPass):
    opcode = ""

    def __init__(self, threshold_bytes: int = DEFAULT_COMBINE_BYTES,
                 threshold_count: int = DEFAULT_COMBINE_COUNT):
        self.threshold_bytes = threshold_bytes
        self.threshold_count = threshold_count

    # What a participant does with its operand, besides who takes part.
    def operation_key(self, inst: HloInstruction) -> tuple | None:
        raise NotImplementedError

    def key(self, inst: HloInstruction) -> tuple | None:
        """Collectives with equal keys may be combined; None: never."""
        if inst.opcode != self.opcode or inst.shape.is_tuple or len(inst.operands) != 1 \
                or inst.operands[0].shape.is_tuple or inst.attrs.get("constrain_layout") \
                or inst.has_control_dependencies():
            return None
        operation = self.operation_key(inst)
        if operation is None:
            return None
        try:
            groups = C.instruction_groups(inst)
        except HloError:   # malformed groups: the thunk emitter reports them
            return None
        return (operation, groups, C.channel_id(inst) is not None,
                bool(inst.attrs.get("use_global_device_ids", False)))

    def run_on(self, comp: HloComputation) -> bool:
        groups = self._groups(comp)
        for group in groups:
            self._combine(comp, group)
        return bool(groups)

    def _groups(self, comp: HloComputation) -> list[list[HloInstruction]]:
        """The groups of two or more collectives to combine. Candidates are
        grouped by key and by level, a candidate's level being the most
        candidates on one path above it. Two candidates of one level never
        depend on each other, and combining a group adds paths only from
        the ancestors of its members (lower levels) to their users (higher
        levels), so no combination makes another one a cycle: every group
        is combined at once. Within a level and key, groups are closed in
        post order at the byte and count thresholds."""
        keys: dict[int, tuple] = {}
        for inst in comp.instructions:
            key = self.key(inst)
            if key is not None:
                keys[id(inst)] = key
        if len(keys) < 2:
            return []
        # above[x]: the most candidates on a path ending just above x.
        above: dict[int, int] = {}
        open_groups: dict[tuple, tuple[list[HloInstruction], int]] = {}
        groups: list[list[HloInstruction]] = []
        for inst in comp.post_order():
            level = 0
            for pred in (*inst.operands, *inst.control_predecessors()):
                level = max(level, above.get(id(pred), 0) + (id(pred) in keys))
            above[id(inst)] = level
            key = keys.get(id(inst))
            if key is None:
                continue
            size = _nbytes(inst.shape)
            members, total = open_groups.get((level, key), ([], 0))
            if members and (total + size > self.threshold_bytes or
                            len(members) >= self.threshold_count):
                groups.append(members)
                members, total = [], 0
            open_groups[(level, key)] = ([*members, inst], total + size)
        groups.extend(members for members, _ in open_groups.values())
        return [g for g in groups if len(g) > 1]

    def _combine(self, comp: HloComputation, group: list[HloInstruction]) -> None:
        first = group[0]
        attrs: dict[str, Any] = {k: v for k, v in first.attrs.items()
                                 if k not in ("metadata",)}
        shape = Shape(tuple_shapes=tuple(inst.shape for inst in group))
        combined = comp.add(self.opcode, shape, [inst.operands[0] for inst in group],
                            name=f"{first.name}.combined", **attrs)
        for index, inst in enumerate(group):
            element = comp.add("get-tuple-element", inst.shape, [combined],
                               name=f"{inst.name}.element", index=index)
            inst.replace_all_uses_with(element)
            comp.remove_instruction(inst)


def _reduction(inst: HloInstruction) -> str | None:
    reducer = inst.attrs.get("to_apply")
    if not isinstance(reducer, HloComputation) or reducer.root is None:
        return None
    return simple_binary(reducer, inst.shape.element_type)


class AllReduceCombiner(_CollectiveCombiner):
    name = "all-reduce-combiner"
    opcode = "all-reduce"

    def operation_key(self, inst):
        kind = _reduction(inst)
        return None if kind is None else (kind, inst.shape.element_type)


class AllGatherCombiner(_CollectiveCombiner):
    name = "all-gather-combiner"
    opcode = "all-gather"

    def operation_key(self, inst):
        dim = C.collective_dimension(inst)
        return None if dim is None else (dim,)


class ReduceScatterCombiner(_CollectiveCombiner):
    name = "reduce-scatter-combiner"
    opcode = "reduce-scatter"

    def operation_key(self, inst):
        kind, dim = _reduction(inst), C.collective_dimension(inst)
        if kind is None or dim is None:
            return None
        return (kind, inst.shape.element_type, dim)

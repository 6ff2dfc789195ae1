"""DotMerger, as XLA:GPU runs it in its simplification pipeline: two dots
that read one operand on the same side, with the same dimension numbers,

    x = dot(a, b)            z = dot(a, concatenate(b, c))
    y = dot(a, c)     ->     x = slice(z)    y = slice(z)

become one product over the two other operands joined along their one
free (non-contracting, non-batch) dimension, and the two results slices of
it. A transformer's query, key and value projections of one input are then
one gemm: fewer launches, and products that fill a GPU (or a BLAS call)
better than three small ones.

Merged only when the two agree on everything but that free dimension
(dimension numbers, types, precision, the other operand's remaining
dimensions), at least one of them moves at most `max_size_to_merge` bytes
(operands and result: XLA's `xla_gpu_dot_merger_threshold_mb`, 32 MiB), so
that two large products, which fill the device each, stay apart, and the
order has room for the merged dot: everything either reads comes before
everything that reads either. That also rules out a dot reaching the other
(a path from one to the other runs through a reader of the first and ends
at an operand of the second), which XLA checks on a reachability map, and
leaves out a pair XLA would merge by moving instructions (a reader of one
dot placed before an operand of the other): the order is read once, the
merged instructions placed between their operands and readers. Merges
repeat until none is left: a third dot reading the same operand joins the
first merged pair.
"""

from __future__ import annotations

from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction
from .dot_canonicalization import dot_dimension_numbers
from .pipeline import ComputationPass
from .util import array_shape, byte_size

__all__ = ["DotMerger", "DOT_MERGER_MAX_BYTES"]

DOT_MERGER_MAX_BYTES = 32 << 20

# What the two dots must not differ in but their operands and shapes.
_IGNORED_ATTRS = frozenset({"metadata"})


class DotMerger(ComputationPass):
    name = "dot-merger"

    def __init__(self, max_size_to_merge: int = DOT_MERGER_MAX_BYTES):
        self.max_size_to_merge = max_size_to_merge

    def run_on(self, comp: HloComputation) -> bool:
        # Pairs found unmergeable stay so (kept alive: their ids are not
        # reused): a merge changes neither dot of another pair nor moves an
        # instruction.
        self._refused: dict[tuple[int, int], tuple[HloInstruction, HloInstruction]] = {}
        order = comp.instructions
        # The order as positions; a merge places its instructions between
        # what they read and what reads theirs (fractions), so the order
        # is read once.
        self._position: dict[int, float] = {id(inst): k for k, inst in enumerate(order)}
        # The dots by the operand and side they share, in order.
        self._groups: dict[tuple[int, int], list[HloInstruction]] = {}
        for inst in order:
            if inst.opcode == "dot" and inst.operands[0] is not inst.operands[1]:
                for side in (0, 1):
                    self._groups.setdefault((id(inst.operands[side]), side), []).append(inst)
        changed = False
        while self._merge_one(comp):
            changed = True
        return changed

    def _merge_one(self, comp: HloComputation) -> bool:
        """Merges the first pair found (the dots in instruction order,
        grouped by the operand and side they share); False when there is
        none."""
        refused, position = self._refused, self._position
        for (_, side), dots in self._groups.items():
            for i, a in enumerate(dots):
                for b in dots[i + 1:]:
                    if (id(a), id(b)) in refused:
                        continue
                    free = _mergeable(a, b, side)
                    room = None
                    if free is not None and self._small_enough(a, b):
                        room = _room(a, b, position)
                    if room is not None:
                        self._place(a, b, side, room, _merge(comp, a, b, side, free))
                        return True
                    refused[(id(a), id(b))] = (a, b)
        return False

    def _place(self, a: HloInstruction, b: HloInstruction, side: int,
               room: tuple[float, float], made: list[HloInstruction]) -> None:
        """Positions and groups after `a` and `b` became `made` (the joined
        operand, the merged dot, two slices), in order within `room`."""
        joined, merged, *parts = made
        low, high = room
        step = (high - low) / 4
        position = self._position
        position[id(joined)] = low + step
        position[id(merged)] = low + 2 * step
        for part in parts:
            position[id(part)] = low + 3 * step
        groups = self._groups
        shared = groups[(id(a.operands[side]), side)]
        shared[shared.index(a)] = merged    # identity: no `__eq__`
        shared.remove(b)
        for dot in (a, b):
            groups[(id(dot.operands[1 - side]), 1 - side)].remove(dot)
        groups[(id(joined), 1 - side)] = [merged]

    def _small_enough(self, a: HloInstruction, b: HloInstruction) -> bool:
        return min(_bytes_moved(a), _bytes_moved(b)) <= self.max_size_to_merge


def _bytes_moved(dot: HloInstruction) -> int:
    return byte_size(dot.shape) + sum(byte_size(o.shape) for o in dot.operands)


def _mergeable(a: HloInstruction, b: HloInstruction, side: int) -> int | None:
    """The free dimension of the operands `a` and `b` do not share (the
    other side of `side`) when the two dots merge along it; None when they
    do not."""
    if a.shape.is_tuple or b.shape.is_tuple or \
            a.attrs.get(CONTROL_PREDECESSORS) or b.attrs.get(CONTROL_PREDECESSORS):
        return None
    if any(o is a for o in b.operands) or any(o is b for o in a.operands):
        # One reads the other (a scan's products A @ (A @ c) unrolled): the
        # merged dot would read itself. (Longer paths leave no room.)
        return None
    if {k: v for k, v in a.attrs.items() if k not in _IGNORED_ATTRS} != \
            {k: v for k, v in b.attrs.items() if k not in _IGNORED_ATTRS}:
        return None
    if a.shape.element_type != b.shape.element_type or \
            not a.shape.is_row_major or not b.shape.is_row_major:
        return None
    x, y = a.operands[1 - side], b.operands[1 - side]
    if x.shape.element_type != y.shape.element_type or x.shape.rank != y.shape.rank or \
            not x.shape.is_row_major or not y.shape.is_row_major:
        return None
    lb, rb, lc, rc = dot_dimension_numbers(a)
    batch, contracting = (rb, rc) if side == 0 else (lb, lc)
    free = [d for d in range(x.shape.rank) if d not in batch and d not in contracting]
    if len(free) != 1:
        return None
    (d,) = free
    if any(x.shape.dims[k] != y.shape.dims[k] for k in range(x.shape.rank) if k != d):
        return None
    return d


def _room(a: HloInstruction, b: HloInstruction,
          position: dict[int, float]) -> tuple[float, float] | None:
    """Where in the order the merged dot goes: after everything the two
    read, before everything that reads either; None when something reading
    one comes before something the other reads (which is so when one
    reaches the other through another instruction; `_mergeable` refuses
    one reading the other directly)."""
    low = max(position[id(o)] for o in (*a.operands, *b.operands))
    readers = [position[id(u)] for dot in (a, b) for u in dot.users]
    high = min(readers) if readers else low + 4.0
    return (low, high) if low < high else None


def _merge(comp: HloComputation, a: HloInstruction, b: HloInstruction, side: int,
           free: int) -> list[HloInstruction]:
    """Replaces `a` and `b` by slices of one dot; returns the new
    instructions: the joined operand, the dot, the slices of `a` and `b`."""
    shared = a.operands[side]
    x, y = a.operands[1 - side], b.operands[1 - side]
    joined_dims = list(x.shape.dims)
    joined_dims[free] += y.shape.dims[free]
    joined = comp.add("concatenate", array_shape(x.shape.element_type, joined_dims),
                      [x, y], dimensions=(free,))
    # The result's dims: batch, the lhs's free dims, the rhs's free dims;
    # the joined operand has one free dim: the last result dim when it is
    # the rhs, the one after the batch dims when it is the lhs.
    lb = dot_dimension_numbers(a)[0]
    at = a.shape.rank - 1 if side == 0 else len(lb)
    result_dims = list(a.shape.dims)
    result_dims[at] += b.shape.dims[at]
    operands = [shared, joined] if side == 0 else [joined, shared]
    attrs = dict(a.attrs)
    merged = comp.add_instruction(HloInstruction.create(
        "dot", array_shape(a.shape.element_type, result_dims), operands, **attrs))
    start = 0
    parts = []
    for dot in (a, b):
        bounds = [(0, n, 1) for n in dot.shape.dims]
        size = dot.shape.dims[at]
        bounds[at] = (start, start + size, 1)
        start += size
        part = comp.add("slice", array_shape(dot.shape.element_type, dot.shape.dims),
                        [merged], slice=bounds)
        part.location = dot.location
        parts.append(part)
    for dot, part in zip((a, b), parts):
        dot.replace_with(part)
    return [joined, merged, *parts]

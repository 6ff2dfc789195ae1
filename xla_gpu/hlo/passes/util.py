"""Helpers the passes share: shapes with default layouts, which
computations hold "program" instructions, side effects, opcode classes."""

from __future__ import annotations

from math import prod
from typing import Iterator

from ..fusions import ELEMENTWISE_OPCODES
from ..graph import post_order
from ..module import HloComputation, HloInstruction, HloModule
from ..opcodes import has_side_effect
from ..shape import Shape, bit_width, default_layout, per_shape, same_shape

__all__ = ["array_shape", "default_layout", "with_default_layout",
           "program_computations", "program_instructions", "has_side_effect", "is_elementwise",
           "is_scalar_constant", "is_effective_scalar", "byte_size",
           "same_shape", "free_name", "ELEMENTWISE_OPCODES", "CONTROL_FLOW_OPCODES"]

# Instructions whose called computations hold program-level instructions
# (passes run there), as opposed to fusion bodies and per-element
# computations (reducers, comparators, scatter combiners).
CONTROL_FLOW_OPCODES = frozenset({"while", "conditional", "call", "async-start"})


def array_shape(element_type: str, dims) -> Shape:
    """An array shape with XLA's default (row-major) layout."""
    dims = tuple(int(d) for d in dims)
    return Shape(element_type, dims, default_layout(len(dims)))


def with_default_layout(shape: Shape) -> Shape:
    if shape.is_tuple:
        return Shape("", (), None, tuple(with_default_layout(s) for s in shape.tuple_shapes))
    if shape.element_type == "token":
        return shape
    return Shape(shape.element_type, shape.dims, default_layout(shape.rank))


@per_shape
def byte_size(shape: Shape) -> int:
    """Bytes of all leaves (sub-byte types one per byte, as stored here)."""
    total = 0
    for leaf in shape.leaves():
        if leaf.element_type in ("", "token"):
            continue
        total += prod(leaf.dims) * max(8, bit_width(leaf.element_type)) // 8
    return total


def is_elementwise(inst: HloInstruction) -> bool:
    """Computes each output element from the operands' elements at the same
    index (a bitcast-convert between widths adds a dimension: not)."""
    if inst.opcode not in ELEMENTWISE_OPCODES or inst.opcode == "bitcast":
        return False
    if inst.opcode == "bitcast-convert":
        return inst.shape.rank == inst.operands[0].shape.rank
    return True


def is_effective_scalar(shape: Shape) -> bool:
    return not shape.is_tuple and prod(shape.dims) == 1


def is_scalar_constant(inst: HloInstruction) -> bool:
    return inst.opcode == "constant" and not inst.shape.is_tuple and inst.shape.rank == 0


def program_computations(module: HloModule) -> list[HloComputation]:
    """The ENTRY and the computations it reaches through control flow
    (while bodies and conditions, conditional branches, calls), callees
    first. The last callee of the last instruction is walked first (a
    while's body before its condition): the order the passes visit
    computations in, and so the order in which they create names."""
    return post_order([module.entry], _control_flow_callees_last_first)


def program_instructions(module: HloModule) -> Iterator[tuple[HloComputation, HloInstruction]]:
    """(computation, instruction) for every instruction of the program
    computations (callees first), each computation's instructions as they
    are when its turn comes: the instructions a rewrite adds on the way are
    not visited, and those it removes are skipped."""
    for comp in program_computations(module):
        for inst in list(comp.instructions):
            if inst.parent is comp:
                yield comp, inst


def _control_flow_callees_last_first(comp: HloComputation) -> list[HloComputation]:
    return [called for inst in reversed(comp.instructions)
            if inst.opcode in CONTROL_FLOW_OPCODES
            for called in reversed(inst.called_computations)]


def free_name(taken, base: str) -> str:
    """`base`, or the first of `base.1`, `base.2`, ... not in `taken`."""
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}.{n}"
    return name

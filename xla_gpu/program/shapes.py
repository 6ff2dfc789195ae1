"""The leaves of a program value's shape, with their shape indices (tokens
included: the thunk emitter and the constants see every leaf buffer
assignment may have given a slice)."""

from __future__ import annotations

from ..hlo import Shape

__all__ = ["leaves", "subshape"]


def leaves(shape: Shape, prefix: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], Shape]]:
    """(shape index, array shape) of every leaf, depth first."""
    out = []
    stack = [(prefix, shape)]
    while stack:
        index, s = stack.pop()
        if s.is_tuple:
            stack.extend(reversed([(index + (i,), t) for i, t in enumerate(s.tuple_shapes)]))
        else:
            out.append((index, s))
    return out


def subshape(shape: Shape, index: tuple[int, ...]) -> Shape:
    """The shape at `index`."""
    for i in index:
        shape = shape.tuple_shapes[i]
    return shape

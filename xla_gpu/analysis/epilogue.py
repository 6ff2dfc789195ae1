"""Graph questions the fusion analysis asks about a hero and the ops between
it and its root (the epilogue): reachability, and whether an epilogue keeps
the hero's index (elementwise) or its elements' linear order. Iterative
walks only: fusions of thousands of ops must not hit the recursion limit."""

from __future__ import annotations

from math import prod
from typing import Callable, Iterable

from ..hlo import HloInstruction
from ..hlo.fusions import ELEMENTWISE_OPCODES

__all__ = ["reaches", "reaches_any", "epilogue_chain_ok", "is_elementwise_epilogue",
           "is_order_preserving_epilogue", "selects_output", "has_epilogue",
           "ORDER_PRESERVING_OPCODES"]

# Ops that keep every element's row-major linear position: an epilogue of
# them runs at the linear position of the hero's element.
ORDER_PRESERVING_OPCODES = ELEMENTWISE_OPCODES | {"bitcast", "reshape", "copy"}


def selects_output(root: HloInstruction, hero: HloInstruction) -> bool:
    """Whether `root` is one output of the variadic `hero` taken as it is
    (a get-tuple-element of it: jax's argmax computation ends so)."""
    return root.opcode == "get-tuple-element" and root.operands[0] is hero \
        and hero.shape.is_tuple


def has_epilogue(root: HloInstruction, hero: HloInstruction) -> bool:
    """Whether ops between `hero` and `root` compute something (a root
    that is the hero, or one output of it, has none)."""
    return root is not hero and not selects_output(root, hero)


def reaches(inst: HloInstruction, target: HloInstruction) -> bool:
    """Whether `target` is `inst` or one of its transitive operands."""
    return reaches_any([inst], {id(target)})


def reaches_any(starts: Iterable[HloInstruction], targets: set[int]) -> bool:
    """Whether an instruction whose id() is in `targets` is one of `starts`
    or a transitive operand of one."""
    stack, seen = list(starts), set()
    while stack:
        inst = stack.pop()
        if id(inst) in targets:
            return True
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        stack.extend(inst.operands)
    return False


def epilogue_chain_ok(root: HloInstruction, hero: HloInstruction,
                      accept: Callable[[HloInstruction], bool]) -> bool:
    """Whether every instruction from `hero` up to `root` passes
    `accept(inst)` and reads the hero's chain through one instruction
    (several operands may be that instruction: x * x)."""
    on_path = _reaching(root, hero)
    if id(root) not in on_path:
        return False
    cur = root
    while cur is not hero:
        if not accept(cur):
            return False
        chain = list(dict.fromkeys(o for o in cur.operands if id(o) in on_path))
        if len(chain) != 1:
            return False
        cur = chain[0]
    return True


def _reaching(root: HloInstruction, hero: HloInstruction) -> set[int]:
    """id() of `root` and its transitive operands that are `hero` or read it,
    from one post-order walk (linear in the ops above the hero)."""
    result: set[int] = set()
    visited: set[int] = set()
    stack: list[tuple[HloInstruction, bool]] = [(root, False)]
    while stack:
        inst, operands_done = stack.pop()
        if operands_done:
            if inst is hero or any(id(o) in result for o in inst.operands):
                result.add(id(inst))
            continue
        if id(inst) in visited:
            continue
        visited.add(id(inst))
        stack.append((inst, True))
        if inst is not hero:
            stack.extend((o, False) for o in inst.operands if id(o) not in visited)
    return result


def is_elementwise_epilogue(root: HloInstruction, hero: HloInstruction) -> bool:
    """Whether every instruction from `hero` up to `root` is elementwise on
    the hero's shape (so the epilogue runs at the hero's index)."""
    return epilogue_chain_ok(root, hero, lambda i: i.opcode in ELEMENTWISE_OPCODES
                             and i.shape.dims == hero.shape.dims)


def is_order_preserving_epilogue(root: HloInstruction, hero: HloInstruction) -> bool:
    """Whether the ops from `hero` up to `root` keep every element's linear
    position (elementwise ops, bitcasts, reshapes, copies), each reading the
    hero's chain through one instruction."""
    size = prod(hero.shape.dims)
    return epilogue_chain_ok(root, hero, lambda i: i.opcode in ORDER_PRESERVING_OPCODES
                             and not i.shape.is_tuple and prod(i.shape.dims) == size)

"""`remove_dead(comp, keep)`: `HloComputation.remove_dead` for the passes
that call it after every computation they changed, with a cheaper liveness
walk (a set and a stack over the operands: the walk's order is never
used). Same instructions removed, in the same order, through the same
`remove_instructions`."""

from __future__ import annotations

from typing import Callable

from ..module import HloComputation, HloInstruction

__all__ = ["remove_dead"]


def remove_dead(comp: HloComputation,
                keep: Callable[[HloInstruction], bool] | None = None) -> int:
    """Removes every instruction that neither the root nor a parameter nor
    an instruction `keep` protects needs; returns how many."""
    if comp._all_used():
        return 0
    insts = comp._instructions
    stack = [comp.root] if comp.root is not None else []
    if keep is None:
        stack += [i for i in insts if i.opcode == "parameter"]
    else:
        stack += [i for i in insts if i.opcode == "parameter" or keep(i)]
    live: set[int] = set()
    add = live.add
    pop = stack.pop
    extend = stack.extend
    while stack:
        inst = pop()
        key = id(inst)
        if key not in live:
            add(key)
            extend(inst.operands)
    dead = [i for i in insts if id(i) not in live]
    comp.remove_instructions(dead)
    return len(dead)

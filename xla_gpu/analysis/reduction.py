"""Reduction analysis: the reduce input seen as [K0, R, K1] (reduced
dimensions contiguous once size-1 dimensions are dropped), and whether the
reduction emitter can take a fusion (the fusion analysis sends it to the
loop emitter otherwise, which reduces sequentially in each thread).

The reduction emitter takes a fusion whose reduce heroes all reduce the same
dimensions of inputs of one shape, with scalar init values, whose roots are
those reduces (or elementwise epilogues of them) or side outputs shaped like
the reduce input, and in which no reduce feeds another reduce's input, a
side output, or an epilogue other than its own.
"""

from __future__ import annotations

from math import prod

from ..hlo import HloError, HloInstruction
from .epilogue import is_elementwise_epilogue

__all__ = ["ReductionLayout", "reduction_layout", "reduction_refusal",
           "reduce_heroes", "checked_layout"]


class ReductionLayout:
    """The reduce input as [K0, R, K1] (K = K0 * K1 kept elements): `R`
    elements reduced per output element; a row reduction (K1 == 1) reduces
    the minor dimensions, a column reduction keeps K1 elements below them."""

    def __init__(self, dims: list[int], reduced: list[int]):
        self.dims = list(dims)
        self.reduced = sorted(reduced)
        self.kept = [i for i in range(len(dims)) if i not in self.reduced]
        big = [i for i in range(len(dims)) if dims[i] > 1]
        big_reduced = [i for i in big if i in self.reduced]
        last = big_reduced[-1] if big_reduced else len(dims) - 1
        self.R = prod(dims[i] for i in self.reduced)
        self.K = prod(dims[i] for i in self.kept)
        self.K1 = prod(dims[i] for i in self.kept if i > last)
        self.K0 = self.K // self.K1
        self.is_row = self.K1 == 1


def _layout_refusal(dims: list[int], reduced: list[int]) -> str | None:
    big = [i for i in range(len(dims)) if dims[i] > 1]
    big_reduced = [i for i in big if i in reduced]
    if not big_reduced:
        return "the reduction reduces only size-1 dimensions"
    first, last = big.index(big_reduced[0]), big.index(big_reduced[-1])
    if big[first:last + 1] != big_reduced:
        return "the reduced dimensions are not contiguous"
    return None


def reduce_heroes(heroes: list[HloInstruction]) -> list[HloInstruction]:
    """The distinct reduce heroes, in output order."""
    return list(dict.fromkeys(h for h in heroes if h.opcode == "reduce"))


def reduction_layout(reduce: HloInstruction) -> ReductionLayout:
    return ReductionLayout(list(reduce.operands[0].shape.dims),
                           list(reduce.attrs["dimensions"]))


def reduction_refusal(roots: list[HloInstruction],
                      heroes: list[HloInstruction]) -> str | None:
    """Why the reduction emitter cannot take a fusion with these roots and
    heroes, or None when it can."""
    reduces = reduce_heroes(heroes)
    if not reduces:
        return "no reduce among the heroes"
    first = reduces[0]
    dims = list(first.operands[0].shape.dims)
    reduced = sorted(first.attrs["dimensions"])
    refusal = _layout_refusal(dims, reduced)
    if refusal is not None:
        return refusal
    for h in reduces[1:]:
        if list(h.operands[0].shape.dims) != dims or sorted(h.attrs["dimensions"]) != reduced:
            return "reduce heroes of different shapes"
    for root, hero in zip(roots, heroes):
        if hero.opcode == "reduce":
            if root is not hero and not is_elementwise_epilogue(root, hero):
                return f"the epilogue of '{hero.name}' is not elementwise"
            if root is not hero and hero.shape.is_tuple:
                return "an epilogue of a variadic reduce"
        elif root.shape.is_tuple or list(root.shape.dims) != dims:
            return f"output '{root.name}' is neither a reduction nor shaped like the reduce input"
    for h in reduces:
        if any(o.shape.rank for o in h.operands[len(h.operands) // 2:]):
            return "init values must be scalars"
    # A reduced value exists only after the reduction: nothing but its own
    # epilogue may read it (not another reduce's input, not a side output,
    # not another epilogue).
    hero_ids = {id(h) for h in reduces}
    starts = [o for h in reduces for o in h.operands] + \
        [r for r, h in zip(roots, heroes) if h.opcode != "reduce"]
    stack, seen = list(starts), set()
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if id(inst) in hero_ids:
            return f"reduce '{inst.name}' feeds another reduction's input or a side output"
        stack.extend(inst.operands)
    for root, hero in zip(roots, heroes):
        if hero.opcode == "reduce" and root is not hero:
            other = _other_reduce_read(root, hero, hero_ids)
            if other is not None:
                return f"the epilogue of '{hero.name}' reads reduce '{other.name}'"
    return None


def _other_reduce_read(root: HloInstruction, hero: HloInstruction,
                       hero_ids: set[int]) -> HloInstruction | None:
    """A reduce hero other than `hero` that the epilogue `root` reads (the
    walk stops at `hero`: what it reads is the reduction's business)."""
    stack, seen = [root], {id(hero)}
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if id(inst) in hero_ids:
            return inst
        stack.extend(inst.operands)
    return None


def checked_layout(roots: list[HloInstruction], heroes: list[HloInstruction]) -> ReductionLayout:
    """The layout of a fusion the analysis gave the reduction emitter."""
    refusal = reduction_refusal(roots, heroes)
    if refusal is not None:
        raise HloError(f"internal: the fusion analysis chose the reduction emitter "
                       f"for a fusion it cannot take ({refusal})")
    return reduction_layout(reduce_heroes(heroes)[0])

"""XLA:GPU's reduction rewrites before fusion, so that every reduction is a
row reduction (reduced dimensions minor) or a column reduction (reduced
dimensions adjacent, kept ones on both sides) with enough parallelism:

* ReductionDimensionGrouper: reduced size-1 dimensions dropped and
  adjacent reduced dimensions merged into one (a bitcast of the input);
* ReductionSplitter: a reduction whose reduced dimensions are not adjacent
  becomes two — the largest reduced dimension first, the rest after;
* TreeReductionRewriter: a reduced dimension too long for one block's worth
  of threads (more than 16384 elements for a row reduction, 4096 for a
  column one) is split into [ceil(n / k), k] (padded with the init value)
  and reduced in two steps: f32[3000001] -> f32[] becomes a row reduction
  of f32[1465,2048] to f32[1465] and then one of f32[1465]; f32[3,2^30] ->
  f32[3] gives 3 * 2^15 rows to the first step instead of 3 blocks.

They assume, as XLA does, that the reducer is associative and
commutative: floating-point sums come out in another order.
"""

from __future__ import annotations

from math import ceil, isqrt

from ..module import HloComputation, HloInstruction, HloModule
from ..shape import Shape
from .pipeline import HloPass
from .util import array_shape, program_instructions

__all__ = ["ReductionDimensionGrouper", "ReductionSplitter", "TreeReductionRewriter",
           "ROW_REDUCTION_LIMIT", "COLUMN_REDUCTION_LIMIT"]

ROW_REDUCTION_LIMIT = 16384
COLUMN_REDUCTION_LIMIT = 4096


def _reduces(module: HloModule):
    return ((comp, inst) for comp, inst in program_instructions(module)
            if inst.opcode == "reduce")


def _reduced_dims(reduce: HloInstruction):
    """(input dims, reduced dimensions sorted, the dimensions of size > 1,
    the reduced ones among them) of a reduce."""
    src = reduce.operands[0].shape.dims
    reduced = sorted(reduce.attrs.get("dimensions", ()))
    big = [d for d in range(len(src)) if src[d] > 1]
    return src, reduced, big, [d for d in big if d in reduced]


def _new_reduce(comp: HloComputation, template: HloInstruction,
                inputs: list[HloInstruction], dims: tuple[int, ...],
                shape: Shape | None = None) -> HloInstruction:
    n = len(template.operands) // 2
    inits = template.operands[n:]
    src = inputs[0].shape.dims
    kept = [src[d] for d in range(len(src)) if d not in dims]
    if shape is None:
        leaves = [array_shape(x.shape.element_type, kept) for x in inputs]
        shape = leaves[0] if n == 1 and not template.shape.is_tuple else \
            Shape("", (), None, tuple(leaves))
    new = template.clone_with([*inputs, *inits], shape=shape, name="reduce")
    new.attrs["dimensions"] = tuple(sorted(dims))
    return comp.add_instruction(new)


def _leaves_of(comp: HloComputation, reduce: HloInstruction) -> list[HloInstruction]:
    if not reduce.shape.is_tuple:
        return [reduce]
    return [comp.add("get-tuple-element", s, [reduce], index=k)
            for k, s in enumerate(reduce.shape.tuple_shapes)]


class ReductionDimensionGrouper(HloPass):
    """Drops the reduced size-1 dimensions of a reduce's input and merges
    adjacent reduced dimensions through a (bitcast-able) reshape."""
    name = "reduction-dimension-grouper"

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp, inst in _reduces(module):
            src = inst.operands[0].shape.dims
            reduced = set(inst.attrs.get("dimensions", ()))
            groups: list[tuple[bool, int]] = []   # (is_reduced, size)
            for d, size in enumerate(src):
                r = d in reduced
                if r and size == 1:
                    continue
                if r and groups and groups[-1][0]:
                    groups[-1] = (True, groups[-1][1] * size)
                else:
                    groups.append((r, size))
            new_dims = [s for _, s in groups]
            if tuple(new_dims) == tuple(src):
                continue
            if not any(r for r, _ in groups):
                continue  # only size-1 dimensions reduced: the simplifier's case
            n = len(inst.operands) // 2
            inputs = [comp.add("reshape", array_shape(x.shape.element_type, new_dims), [x])
                      for x in inst.operands[:n]]
            dims = tuple(k for k, (r, _) in enumerate(groups) if r)
            new = _new_reduce(comp, inst, inputs, dims)
            new.shape = inst.shape  # the kept dimensions are unchanged
            inst.replace_with(new)
            changed = True
        return changed


class ReductionSplitter(HloPass):
    """A reduce whose reduced dimensions are not adjacent is split in two:
    first the largest reduced dimension, then the others."""
    name = "reduction-splitter"

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp, inst in _reduces(module):
            src, reduced, big, big_reduced = _reduced_dims(inst)
            if len(big_reduced) < 2:
                continue
            first, last = big.index(big_reduced[0]), big.index(big_reduced[-1])
            if big[first:last + 1] == big_reduced:
                continue
            largest = max(big_reduced, key=lambda d: (src[d], d))
            n = len(inst.operands) // 2
            step1 = _new_reduce(comp, inst, list(inst.operands[:n]), (largest,))
            rest = tuple(d - (d > largest) for d in reduced if d != largest)
            inputs = _leaves_of(comp, step1)
            step2 = _new_reduce(comp, inst, inputs, rest, shape=inst.shape)
            inst.replace_with(step2)
            changed = True
        return changed


class TreeReductionRewriter(HloPass):
    """Splits a too-long reduced dimension into two reduction steps."""
    name = "tree-reduction-rewriter"

    def __init__(self, row_limit: int = ROW_REDUCTION_LIMIT,
                 column_limit: int = COLUMN_REDUCTION_LIMIT):
        self.row_limit = row_limit
        self.column_limit = column_limit

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp, inst in _reduces(module):
            src, reduced, big, big_reduced = _reduced_dims(inst)
            if len(big_reduced) != 1:
                continue  # the grouper runs first: one reduced dimension
            d = big_reduced[0]
            is_row = all(k in reduced for k in big if k >= d)
            limit = self.row_limit if is_row else self.column_limit
            n_reduced = src[d]
            if n_reduced <= limit:
                continue
            # k: a power of two near sqrt(n), the inner (first) step.
            k = 1 << max(0, (isqrt(n_reduced - 1)).bit_length())
            k = min(k, limit)
            outer = ceil(n_reduced / k)
            padded = outer * k
            n = len(inst.operands) // 2
            inits = inst.operands[n:]
            inputs = []
            for x, init in zip(inst.operands[:n], inits):
                value = x
                if padded != n_reduced:
                    pad_spec = [(0, padded - n_reduced if j == d else 0, 0)
                                for j in range(len(src))]
                    pdims = [padded if j == d else s for j, s in enumerate(src)]
                    value = comp.add("pad", array_shape(x.shape.element_type, pdims),
                                     [value, init], padding=pad_spec)
                split = [*src[:d], outer, k, *src[d + 1:]]
                inputs.append(comp.add("reshape", array_shape(x.shape.element_type, split),
                                       [value]))
            # Step 1 reduces the inner k (and the other reduced size-1 dims).
            inner_dims = tuple(sorted({(r if r < d else r + 1) for r in reduced if r != d}
                                      | {d + 1}))
            step1 = _new_reduce(comp, inst, inputs, inner_dims)
            # Step 2 reduces `outer`, which sits at position d of step1.
            kept_before = sum(1 for j in range(d) if j not in reduced)
            step2 = _new_reduce(comp, inst, _leaves_of(comp, step1), (kept_before,),
                                shape=inst.shape)
            inst.replace_with(step2)
            changed = True
        return changed

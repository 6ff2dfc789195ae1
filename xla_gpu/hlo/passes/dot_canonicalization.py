"""DotCanonicalization (XLA's DotDimensionSorter + DotDecomposer): every dot
becomes a gemm the gemm thunk runs directly,

    lhs [batch, m, k] (or [batch, k, m]: a transposed operand)
    rhs [batch, k, n] (or [batch, n, k])   ->  result [batch, m, n]

with at most one (leading) batch dimension and exactly one m, k and n:
several batch, contracting or free dimensions are made adjacent by a
transpose where needed and merged by a reshape (a bitcast); a missing m or
n becomes a dimension of size 1; the result is reshaped back to the dot's
shape. An operand whose contracting dimension comes before its free one is
left transposed — the gemm reads it transposed (cuBLAS's op(A)), as XLA's
gemm rewriter folds operand transposes into the library call. Dots without
contracting dimensions (outer products) are left to the algebraic
simplifier, which turns them into multiplies.
"""

from __future__ import annotations

from math import prod

from ..module import HloComputation, HloInstruction
from .pipeline import InstructionPass
from .util import array_shape

__all__ = ["DOT_DIM_KEYS", "DotCanonicalization", "dims_are_canonical",
           "dot_dimension_numbers", "is_canonical_dot"]

DOT_DIM_KEYS = ("lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims",
                "rhs_contracting_dims")


def dot_dimension_numbers(inst: HloInstruction) -> tuple[tuple, tuple, tuple, tuple]:
    """(lhs batch, rhs batch, lhs contracting, rhs contracting) dims of dot
    `inst`, in DOT_DIM_KEYS order."""
    a = inst.attrs
    return tuple(tuple(a.get(k, ())) for k in DOT_DIM_KEYS)


def is_canonical_dot(inst: HloInstruction) -> bool:
    lb, rb, lc, rc = dot_dimension_numbers(inst)
    return dims_are_canonical(lb, rb, lc, rc, inst.operands[0].shape.rank,
                              inst.operands[1].shape.rank)


def dims_are_canonical(lb, rb, lc, rc, lhs_rank: int, rhs_rank: int) -> bool:
    """Whether a dot of these batch and contracting dims (lhs, rhs) of
    operands of these ranks is a gemm as it is (see the module text)."""
    lb, rb, lc, rc = tuple(lb), tuple(rb), tuple(lc), tuple(rc)
    nb = len(lb)
    if nb > 1 or len(lc) != 1 or len(rc) != 1:
        return False
    if nb and (lb != (0,) or rb != (0,)):
        return False
    if lhs_rank != nb + 2 or rhs_rank != nb + 2:
        return False
    return lc[0] in (nb, nb + 1) and rc[0] in (nb, nb + 1)


class DotCanonicalization(InstructionPass):
    name = "dot-canonicalization"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "dot" or inst.shape.is_tuple or is_canonical_dot(inst):
            return False
        lb, rb, lc, rc = dot_dimension_numbers(inst)
        if not lc:
            return False  # an outer product: the simplifier's multiply
        self._canonicalize(comp, inst)
        return True

    @staticmethod
    def _side(comp: HloComputation, operand: HloInstruction, batch, contracting,
              is_lhs: bool) -> tuple[HloInstruction, int, int]:
        """The operand as [batch?, free, k] or [batch?, k, free]; returns
        (value, position of k, size of free)."""
        rank = operand.shape.rank
        free = [d for d in range(rank) if d not in batch and d not in contracting]
        canonical = [*batch, *free, *contracting] if is_lhs else [*batch, *contracting, *free]
        swapped = [*batch, *contracting, *free] if is_lhs else [*batch, *free, *contracting]
        identity = list(range(rank))
        if canonical != identity and swapped == identity:
            order, k_first = swapped, is_lhs        # lhs [k, m] / rhs [n, k]
        else:
            order, k_first = canonical, not is_lhs  # lhs [m, k] / rhs [k, n]
        dims = operand.shape.dims
        etype = operand.shape.element_type
        value = operand
        if order != identity:
            value = comp.add("transpose", array_shape(etype, [dims[d] for d in order]),
                             [value], dimensions=tuple(order))
        b = prod(dims[d] for d in batch)
        f = prod(dims[d] for d in free)
        k = prod(dims[d] for d in contracting)
        merged = ([b] if batch else []) + ([k, f] if k_first else [f, k])
        if list(merged) != list(value.shape.dims):
            value = comp.add("reshape", array_shape(etype, merged), [value])
        k_position = (1 if batch else 0) + (0 if k_first else 1)
        return value, k_position, f

    def _canonicalize(self, comp: HloComputation, inst: HloInstruction) -> None:
        lb, rb, lc, rc = dot_dimension_numbers(inst)
        lhs, rhs = inst.operands
        lvalue, lk, m = self._side(comp, lhs, list(lb), list(lc), True)
        rvalue, rk, n = self._side(comp, rhs, list(rb), list(rc), False)
        batch = prod(lhs.shape.dims[d] for d in lb)
        out_dims = ([batch] if lb else []) + [m, n]
        dot = inst.clone_with([lvalue, rvalue],
                              shape=array_shape(inst.shape.element_type, out_dims))
        nb = 1 if lb else 0
        dot.attrs["lhs_batch_dims"] = (0,) if nb else ()
        dot.attrs["rhs_batch_dims"] = (0,) if nb else ()
        dot.attrs["lhs_contracting_dims"] = (lk,)
        dot.attrs["rhs_contracting_dims"] = (rk,)
        if not nb:
            dot.attrs.pop("lhs_batch_dims")
            dot.attrs.pop("rhs_batch_dims")
        # Keep XLA's attribute order: dimension numbers first.
        ordered = {k: dot.attrs[k] for k in DOT_DIM_KEYS if k in dot.attrs}
        ordered.update({k: v for k, v in dot.attrs.items() if k not in ordered})
        dot.attrs = ordered
        comp.add_instruction(dot, name="dot")
        result = dot
        if tuple(out_dims) != tuple(inst.shape.dims):
            result = comp.add("reshape", inst.shape, [dot])
        inst.replace_with(result)

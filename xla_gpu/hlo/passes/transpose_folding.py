"""TransposeFolding (XLA's pass of that name, as XLA:GPU configures it): a
dot operand that is a transpose reads the transpose's operand instead, the
dot's dimension numbers renamed through the permutation, where the dot
that results is one the gemm takes as it is (`dims_are_canonical`: the
library reads an operand transposed, cuBLAS's op(A), and the GEMM emitter
walks either order). `x @ x.T` is then one gemm of x with itself rather
than a transpose kernel, or a GEMM fusion compiled for the transpose in
its prologue, feeding the product.

A canonical operand has one free (non-contracting, non-batch) dimension,
so no fold reorders the dot's result dimensions. The transpose itself
stays for its other users (dead-code elimination removes it where it has
none).
"""

from __future__ import annotations

from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction
from .dot_canonicalization import DOT_DIM_KEYS, dims_are_canonical, dot_dimension_numbers
from .pipeline import InstructionPass

__all__ = ["TransposeFolding"]


class TransposeFolding(InstructionPass):
    name = "transpose-folding"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "dot" or inst.shape.is_tuple or inst.attrs.get(CONTROL_PREDECESSORS):
            return False
        changed = False
        for side in (0, 1):
            operand = inst.operands[side]
            if operand.opcode != "transpose":
                continue
            perm = [int(d) for d in operand.attrs["dimensions"]]
            # (lhs batch, rhs batch, lhs contracting, rhs contracting): this
            # side's batch and contracting dims, renamed onto the source.
            dims = list(dot_dimension_numbers(inst))
            for k in (side, 2 + side):
                dims[k] = tuple(perm[int(d)] for d in dims[k])
            if not dims_are_canonical(*dims, inst.operands[0].shape.rank,
                                      inst.operands[1].shape.rank):
                continue
            for key, value in zip(DOT_DIM_KEYS, dims):
                if value or key in inst.attrs:
                    inst.attrs[key] = value
            inst.replace_operand_with(side, operand.operands[0])
            changed = True
        return changed

"""TransposeFolding (XLA's pass of that name, as XLA:GPU configures it): a
dot operand that is a transpose reads the transpose's operand instead, the
dot's dimension numbers renamed through the permutation, where the dot
that results is one the gemm takes as it is (`is_canonical_dot`: the
library reads an operand transposed, cuBLAS's op(A), and the GEMM emitter
walks either order). `x @ x.T` is then one gemm of x with itself rather
than a transpose kernel, or a GEMM fusion compiled for the transpose in
its prologue, feeding the product.

A transpose is folded only where it keeps the order of the operand's free
(non-contracting, non-batch) dimensions, which decides the order of the
dot's result dimensions; the transpose itself stays for its other users
(dead-code elimination removes it where it has none).
"""

from __future__ import annotations

from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction
from .dot_canonicalization import dims_are_canonical
from .pipeline import InstructionPass

__all__ = ["TransposeFolding", "folded_dot_dims"]

_BATCH = ("lhs_batch_dims", "rhs_batch_dims")
_CONTRACTING = ("lhs_contracting_dims", "rhs_contracting_dims")


def folded_dot_dims(dot: HloInstruction, side: int) -> tuple[list[int], list[int]] | None:
    """(batch dims, contracting dims) of operand `side` (0 lhs, 1 rhs) of
    `dot` renamed onto the operand of the transpose it is, or None when the
    operand is not a transpose or the transpose reorders its free dims."""
    operand = dot.operands[side]
    if operand.opcode != "transpose":
        return None
    perm = [int(d) for d in operand.attrs["dimensions"]]
    batch = [int(d) for d in dot.attrs.get(_BATCH[side], ())]
    contracting = [int(d) for d in dot.attrs.get(_CONTRACTING[side], ())]
    free = [d for d in range(len(perm)) if d not in batch and d not in contracting]
    moved_free = [perm[d] for d in free]
    if moved_free != sorted(moved_free):
        return None
    return [perm[d] for d in batch], [perm[d] for d in contracting]


class TransposeFolding(InstructionPass):
    name = "transpose-folding"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "dot" or inst.shape.is_tuple or inst.attrs.get(CONTROL_PREDECESSORS):
            return False
        changed = False
        for side in (0, 1):
            folded = folded_dot_dims(inst, side)
            if folded is None:
                continue
            source = inst.operands[side].operands[0]
            dims = {k: [int(d) for d in inst.attrs.get(k, ())] for k in _BATCH + _CONTRACTING}
            dims[_BATCH[side]], dims[_CONTRACTING[side]] = folded
            shapes = [o.shape for o in inst.operands]
            shapes[side] = source.shape
            if not dims_are_canonical(dims["lhs_batch_dims"], dims["rhs_batch_dims"],
                                      dims["lhs_contracting_dims"],
                                      dims["rhs_contracting_dims"],
                                      shapes[0].rank, shapes[1].rank):
                continue
            for key in (_BATCH[side], _CONTRACTING[side]):
                if dims[key] or key in inst.attrs:
                    inst.attrs[key] = tuple(dims[key])
            inst.replace_operand_with(side, source)
            changed = True
        return changed

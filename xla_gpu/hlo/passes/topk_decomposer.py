"""TopkDecomposer: XLA's pass of that name, for the top-k ops that are not
one kernel (`analysis.sort.fits_one_kernel`: rows longer than a tile with
k above TOPK_SELECT_MAX_K; the others run as the sort emitter's one top-k
kernel). Such a top-k becomes a stable sort of
(values, an s32 iota along the last dimension) with its comparator,
followed by slices of the first k columns; the sort then runs as the sort
emitter's sequence of kernels (after StableSortExpander gives it its
tie-break, the iota it already has).
"""

from __future__ import annotations

from ...analysis.sort import INDEX_TYPE, fits_one_kernel, is_topk, topk_k, \
    topk_operand_comparator
from ..module import HloModule
from ..shape import Shape
from .pipeline import HloPass

__all__ = ["TopkDecomposer", "decompose_topk"]


class TopkDecomposer(HloPass):
    name = "topk-decomposer"

    def run(self, module: HloModule) -> bool:
        return decompose_topk(module) > 0


def decompose_topk(module: HloModule) -> int:
    """XLA's TopkDecomposer for the top-k ops whose rows do not fit one
    kernel: a stable sort of (values, s32 iota along the last dim) with the
    comparator, then slices of the first k columns. Mutates `module`;
    returns the number of ops rewritten."""
    count = 0
    for comp in list(module.computations):
        for inst in list(comp.instructions):
            if not is_topk(inst) or fits_one_kernel(inst):
                continue
            k = topk_k(inst)
            x = inst.operands[0]
            shape = x.shape
            rank = shape.rank
            comparator = topk_operand_comparator(inst)
            if comparator not in module.computations:   # made here: the module keeps it
                module.add_computation(comparator, before=comp)
            iota_shape = Shape(INDEX_TYPE, tuple(shape.dims), shape.layout)
            iota = comp.add("iota", iota_shape, [], name=f"{inst.name}.iota",
                            iota_dimension=rank - 1)
            sort = comp.add("sort", Shape(tuple_shapes=(shape, iota_shape)), [x, iota],
                            name=f"{inst.name}.sort", dimensions=(rank - 1,),
                            is_stable=True, to_apply=comparator)
            window = [(0, d, 1) for d in shape.dims[:-1]] + [(0, k, 1)]
            parts = []
            for index, leaf in enumerate(inst.shape.leaves()):
                whole = comp.add("get-tuple-element", sort.shape.tuple_shapes[index], [sort],
                                 name=f"{inst.name}.sorted.{index}", index=index)
                parts.append(comp.add("slice", leaf, [whole], name=f"{inst.name}.top.{index}",
                                      slice=list(window)))
            result = comp.add("tuple", inst.shape, parts, name=f"{inst.name}.result")
            inst.replace_with(result)
            count += 1
    return count

"""SelectAndScatterExpander (XLA's pass of that name, which XLA:CPU runs and
whose result XLA:GPU's dumps show too): a `select-and-scatter` becomes the
two steps its definition describes, in ops the emitters already have.

1. *Select*: one variadic `reduce-window` over the operand and one iota per
   dimension (the element's position). Its reducer keeps the accumulated
   candidate when `select(candidate, element)` holds and takes the element
   otherwise, visiting a window's elements in row-major order as
   select-and-scatter does; a position of -1 marks "nothing chosen yet"
   (the init value, and what padding contributes), so padding is never
   selected and the first real element is always taken.
2. *Scatter*: each source element is combined (the `scatter` computation)
   into a result filled with the init value, at the position its window
   selected. A window made only of padding selects -1: an out-of-bounds
   index, which a scatter skips, as select-and-scatter adds nothing there.

Base dilation does not exist for select-and-scatter (XLA's verifier
refuses it); window dilation and padding are carried to the reduce-window."""

from __future__ import annotations

import numpy as np

from ..module import HloComputation, HloInstruction
from ..shape import Shape
from .pipeline import InstructionPass
from .util import array_shape

__all__ = ["SelectAndScatterExpander"]

_INDEX = "s32"


def _scalar(element_type: str) -> Shape:
    return array_shape(element_type, ())


def _select_reducer(select: HloComputation, value_type: str, rank: int) -> HloComputation:
    """(value, position...) x (value, position...) -> the chosen tuple."""
    comp = HloComputation(f"{select.name}.select_reducer")
    value, index = _scalar(value_type), _scalar(_INDEX)
    pred = _scalar("pred")
    number = 0

    def parameter(shape: Shape, name: str) -> HloInstruction:
        nonlocal number
        inst = comp.add_instruction(HloInstruction.create_parameter(number, shape, name))
        number += 1
        return inst

    acc = [parameter(value, "acc_value")] + [parameter(index, f"acc_pos{d}")
                                             for d in range(rank)]
    elem = [parameter(value, "elem_value")] + [parameter(index, f"elem_pos{d}")
                                               for d in range(rank)]
    none = comp.add_instruction(HloInstruction.create_constant(
        np.array(-1, np.int32), index, "nothing_chosen"))
    acc_chosen = comp.add("compare", pred, [acc[1], none], direction="NE")
    elem_real = comp.add("compare", pred, [elem[1], none], direction="NE")
    # select(acc, elem): the user's computation, inlined on the two values.
    prefers_acc = _inline(comp, select, [acc[0], elem[0]])
    elem_absent = comp.add("not", pred, [elem_real])
    keep = comp.add("or", pred, [
        comp.add("and", pred, [acc_chosen, prefers_acc]),
        comp.add("and", pred, [acc_chosen, elem_absent])])
    chosen = [comp.add("select", a.shape, [keep, a, e]) for a, e in zip(acc, elem)]
    root = comp.add("tuple", Shape("", (), None, tuple(c.shape for c in chosen)), chosen)
    comp.set_root(root)
    return comp


def _inline(comp: HloComputation, callee: HloComputation,
            arguments: list[HloInstruction]) -> HloInstruction:
    """`callee`'s instructions added to `comp` on `arguments`; its root."""
    mapping: dict[int, HloInstruction] = {}
    for inst in callee.instructions:
        if inst.opcode == "parameter":
            mapping[id(inst)] = arguments[inst.parameter_number]
        else:
            mapping[id(inst)] = comp.add_instruction(
                inst.clone_with([mapping[id(o)] for o in inst.operands]))
    return mapping[id(callee.root)]


class SelectAndScatterExpander(InstructionPass):
    name = "select-and-scatter-expander"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "select-and-scatter":
            return False
        operand, source, init = inst.operands
        window = dict(inst.attrs.get("window", {}))
        if any(d != 1 for d in window.get("lhs_dilate", ())):
            raise inst.error("select-and-scatter has no base dilation")
        module = comp.module
        rank = operand.shape.rank
        value_type = operand.shape.element_type
        dims = operand.shape.dims

        reducer = _select_reducer(inst.attrs["select"], value_type, rank)
        if module is not None:
            module.add_computation(reducer, before=comp)
        positions = [comp.add("iota", array_shape(_INDEX, dims), [], iota_dimension=d)
                     for d in range(rank)]
        value_init = comp.add_instruction(HloInstruction.create_constant(
            np.zeros((), operand.shape.dtype), _scalar(value_type)))
        none = comp.add_instruction(HloInstruction.create_constant(
            np.array(-1, np.int32), _scalar(_INDEX)))
        chosen_shape = Shape("", (), None, (
            array_shape(value_type, source.shape.dims),
            *(array_shape(_INDEX, source.shape.dims) for _ in range(rank))))
        chosen = comp.add("reduce-window", chosen_shape,
                          [operand, *positions, value_init, *([none] * rank)],
                          window=window, to_apply=reducer)
        # The chosen positions as scatter indices: [source dims..., rank].
        column = array_shape(_INDEX, (*source.shape.dims, 1))
        columns = [comp.add("reshape", column, [
            comp.add("get-tuple-element", chosen_shape.tuple_shapes[d + 1], [chosen],
                     index=d + 1)]) for d in range(rank)]
        indices = comp.add("concatenate", array_shape(_INDEX, (*source.shape.dims, rank)),
                           columns, dimensions=(rank,))
        filled = comp.add("broadcast", array_shape(value_type, dims), [init], dimensions=())
        scatter = comp.add("scatter", inst.shape, [filled, indices, source],
                           update_window_dims=(), inserted_window_dims=tuple(range(rank)),
                           scatter_dims_to_operand_dims=tuple(range(rank)),
                           index_vector_dim=rank, to_apply=inst.attrs["scatter"])
        inst.replace_with(scatter)
        return True

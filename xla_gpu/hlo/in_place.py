"""Which outputs an instruction writes in place over one of its operands:
the one rule that buffer sharing (`xla_gpu.service.alias_analysis`, copy
insertion) and the emitter choice (`xla_gpu.analysis.fusion`, the in-place
dynamic-update-slice emitter) follow, so that a fusion the in-place emitter
takes is always one whose output may get its operand's buffer (and an
output that gets its operand's buffer is written by a kernel that leaves
the elements it does not update where they are).

A fusion output `root` (an array) is written in place over fusion
parameter P when:

* `root` is a dynamic-update-slice or a scatter of one operand (the
  update), or a bitcast of one that keeps its elements
  (`graph.through_bitcasts(..., keep_elements=True)`: bitcasts between
  row-major shapes of one element type, reshapes of the same elements);
* the update's operand 0 is P, or such a bitcast of P, and every link of
  that chain (P included) is read by nothing else: the elements the update
  leaves alone are P's, so nothing may read P once they are overwritten;
* the update keeps its operand's layout and element type: element i of
  the result lies where element i of the operand lies, so the untouched
  elements are already in place and the kernel writes only the update.

A bitcast that changes the layout or the element type ends the chain: the
kernel would write the window at other positions than the runtime keeps
the parameter's elements (a fusion compiled alone holds a non-row-major
array in its logical order), or values of another type.

A scatter of N operands that is the fusion's root (a tuple of N results)
writes result k over operand k when operand k satisfies the same rule.
"""

from __future__ import annotations

from .graph import through_bitcasts
from .module import HloInstruction

__all__ = ["IN_PLACE_OPCODES", "in_place_update", "in_place_parameter",
           "in_place_outputs"]

# Ops whose result is their operand 0 with some elements replaced.
IN_PLACE_OPCODES = ("dynamic-update-slice", "scatter")

ShapeIndex = tuple[int, ...]


def _parameter_of(operand: HloInstruction, result) -> HloInstruction | None:
    """The fusion parameter that `operand` (the operand an update writes
    over as its result of shape `result`) is through bitcasts that keep
    the elements, read by nothing else on the way; None otherwise."""
    if operand.shape.is_tuple or operand.shape.element_type != result.element_type or \
            operand.shape.minor_to_major != result.minor_to_major:
        return None
    param = through_bitcasts(operand, keep_elements=True)
    if param.opcode != "parameter":
        return None
    inst = operand
    while len(inst.users) == 1:
        if inst is param:
            return param
        inst = inst.operands[0]
    return None


def _update_and_parameter(root: HloInstruction):
    """(update, parameter) for fusion output `root` written in place (see
    the module docstring); (None, None) otherwise."""
    if root.shape.is_tuple:
        return None, None
    update = through_bitcasts(root, keep_elements=True)
    if update.opcode not in IN_PLACE_OPCODES or update.shape.is_tuple:
        return None, None
    param = _parameter_of(update.operands[0], update.shape)
    return (None, None) if param is None else (update, param)


def in_place_update(root: HloInstruction) -> HloInstruction | None:
    """The dynamic-update-slice or one-operand scatter that fusion output
    `root` (an array) is through bitcasts, when it writes in place over a
    fusion parameter (see the module docstring); None otherwise."""
    return _update_and_parameter(root)[0]


def in_place_parameter(root: HloInstruction) -> HloInstruction | None:
    """The fusion parameter whose buffer fusion output `root` (an array) is
    written over in place; None when it is written to a buffer of its own."""
    return _update_and_parameter(root)[1]


def _fused_outputs(root: HloInstruction, index: ShapeIndex
                   ) -> list[tuple[ShapeIndex, HloInstruction]]:
    """(output index, instruction) of each value of a fusion's result:
    tuple instructions of the root are looked into, other instructions
    (a variadic scatter or reduce among them) give one value."""
    if root.opcode == "tuple":
        out = []
        for k, operand in enumerate(root.operands):
            out.extend(_fused_outputs(operand, index + (k,)))
        return out
    return [(index, root)]


def _variadic_scatter_pairs(scatter: HloInstruction, index: ShapeIndex
                            ) -> list[tuple[int, ShapeIndex]]:
    n = (len(scatter.operands) - 1) // 2
    pairs = []
    for k in range(n):
        param = _parameter_of(scatter.operands[k], scatter.shape.tuple_shapes[k])
        if param is not None:
            pairs.append((param.parameter_number, index + (k,)))
    return pairs


def in_place_outputs(inst: HloInstruction) -> list[tuple[int, ShapeIndex]]:
    """[(operand number, output index)]: the outputs `inst` writes in place
    over a whole (array) operand, as its kernel expects. A
    dynamic-update-slice writes over operand 0; a scatter of N operands
    result k over operand k; a fusion the outputs the module docstring's
    rule gives (the operand is the fusion's operand of P's number)."""
    op = inst.opcode
    if op == "dynamic-update-slice":
        return [(0, ())]
    if op == "scatter":
        n = (len(inst.operands) - 1) // 2
        return [(k, (k,) if n > 1 else ()) for k in range(n)]
    if op != "fusion":
        return []
    body = inst.attrs.get("calls")
    if isinstance(body, list):
        body = body[0] if len(body) == 1 else None
    if body is None or body.root is None:
        return []
    pairs: list[tuple[int, ShapeIndex]] = []
    for index, root in _fused_outputs(body.root, ()):
        if root.opcode == "scatter" and root.shape.is_tuple:
            candidates = _variadic_scatter_pairs(root, index)
        else:
            param = in_place_parameter(root)
            candidates = [] if param is None else [(param.parameter_number, index)]
        for number, out_index in candidates:
            if number < len(inst.operands) and not inst.operands[number].shape.is_tuple:
                pairs.append((number, out_index))
    return pairs

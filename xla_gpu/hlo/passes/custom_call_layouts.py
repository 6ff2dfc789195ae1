"""CustomCallLayouts: the buffers a custom-call handler is given are in the
layouts the call asks for, as XLA's layout assignment makes them.

A handler (an XLA FFI or legacy function, registered by name) gets raw
buffers and their logical dimensions, nothing else: it reads each operand in
the layout its `operand_layout_constraints` entry names (jax's LAPACK calls
take column-major `{0,1}` matrices), in the default row-major layout when
the call has no constraints, and writes each result leaf in the layout of
the call's result shape. So:

* an operand whose layout is not the one required goes through a `copy`
  to that layout (layout normalization turns it into a transpose and a
  bitcast, and keeps the bitcast's layout for the call: see
  `is_handler_call`);
* the call's result keeps the layout its shape gives; layout normalization
  lets the users that compute read its logical value through a bitcast and
  a transpose, as for a parameter.

The targets xla_gpu implements itself (TopK, cuBLAS / cuDNN / other
`__`-prefixed XLA calls, sharding annotations) read logical values and are
left alone. `required_operand_shapes` is the rule; the reference interpreter
and the program compiler (for modules that skip this pass) apply the same.
"""

from __future__ import annotations

from ..module import HloComputation, HloInstruction
from ..shape import Shape, default_layout
from .pipeline import ComputationPass

__all__ = ["CustomCallLayouts", "is_handler_call", "required_operand_shapes",
           "layout_constraints"]

# Custom-call targets the compiler emits itself (not through a handler).
_BUILTIN_TARGETS = frozenset({"TopK", "Sharding", "SPMDFullToShardShape",
                              "SPMDShardToFullShape"})


def is_handler_call(inst: HloInstruction) -> bool:
    """A custom call that runs a registered handler on raw buffers."""
    if inst.opcode != "custom-call":
        return False
    target = inst.attrs.get("custom_call_target")
    return isinstance(target, str) and bool(target) and \
        target not in _BUILTIN_TARGETS and not target.startswith("__")


def layout_constraints(inst: HloInstruction) -> tuple[Shape, ...] | None:
    """The shapes of `operand_layout_constraints={...}` (one per operand),
    None when the call has none. An entry that does not match its operand's
    element type and dimensions is an error, as in XLA's verifier."""
    raw = inst.attrs.get("operand_layout_constraints")
    if raw is None:
        return None
    if isinstance(raw, tuple) and all(isinstance(s, Shape) for s in raw):
        shapes = raw
    else:
        shapes = _parse_shapes(inst, str(raw))
    if len(shapes) != len(inst.operands):
        raise inst.error(f"operand_layout_constraints lists {len(shapes)} shape(s) for "
                         f"{len(inst.operands)} operand(s)")
    for k, (shape, operand) in enumerate(zip(shapes, inst.operands)):
        if not _same_array(shape, operand.shape):
            raise inst.error(f"operand_layout_constraints entry {k} is {shape}; operand "
                             f"{k} ('{operand.name}') is {operand.shape}")
    return shapes


def _parse_shapes(inst: HloInstruction, raw: str) -> tuple[Shape, ...]:
    from ..parser import parse_shape_list
    from ...errors import HloParseError
    try:
        return parse_shape_list(raw, f"operand_layout_constraints of '{inst.name}'")
    except HloParseError as e:
        raise inst.error(f"malformed operand_layout_constraints {raw!r}: {e}") from None


def _same_array(a: Shape, b: Shape) -> bool:
    if a.is_tuple or b.is_tuple:
        return a.is_tuple and b.is_tuple and \
            len(a.tuple_shapes) == len(b.tuple_shapes) and \
            all(_same_array(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes))
    return a.element_type == b.element_type and tuple(a.dims) == tuple(b.dims)


def _with_layout(shape: Shape, layout: tuple[int, ...] | None) -> Shape:
    if shape.is_tuple:
        return shape
    if layout is None or shape.element_type == "token":
        layout = default_layout(shape.rank)
    return Shape(shape.element_type, tuple(shape.dims), tuple(layout))


def required_operand_shapes(inst: HloInstruction) -> list[Shape]:
    """Each operand's shape in the layout the handler reads it in: its
    constraint's, or the default layout without constraints (tuple
    operands as their leaves' own layouts)."""
    constraints = layout_constraints(inst)
    out = []
    for k, operand in enumerate(inst.operands):
        if operand.shape.is_tuple:
            out.append(operand.shape)
            continue
        wanted = constraints[k].layout if constraints is not None else None
        out.append(_with_layout(operand.shape, wanted))
    return out


def _layout_of(shape: Shape) -> tuple[int, ...]:
    return shape.minor_to_major


class CustomCallLayouts(ComputationPass):
    name = "custom-call-layouts"

    def run_on(self, comp: HloComputation) -> bool:
        changed = False
        for inst in list(comp.instructions):
            if not is_handler_call(inst):
                continue
            for k, wanted in enumerate(required_operand_shapes(inst)):
                operand = inst.operands[k]
                if wanted.is_tuple or _layout_of(operand.shape) == _layout_of(wanted):
                    continue
                copy = comp.add("copy", wanted, [operand],
                                name=f"{operand.name}.relayout")
                inst.replace_operand_with(k, copy)
                changed = True
        return changed

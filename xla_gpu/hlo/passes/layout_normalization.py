"""LayoutNormalization, as XLA:GPU does it after layout assignment:
instructions compute in the default (row-major) layout of their logical
shape, and layouts survive only on bitcasts, which reinterpret a buffer
in memory order. Concretely:

* an instruction whose result has a non-default layout computes its
  logical value in the default layout instead; the places that see the
  physical order — bitcasts reading it — read `transpose(x)` to the
  physical order first (the transpose is explicit, so the transpose emitter
  gets it);
* a parameter (or get-tuple-element) with a non-default layout is read
  through `bitcast` to its physical order and a `transpose` back to the
  logical order; the ENTRY's result keeps its layout through the opposite
  pair;
* a copy that changed the layout becomes that transpose (a copy to the same
  layout is dropped);
* an elementwise instruction whose operands all have its (non-default)
  layout computes on the physical shape: each operand read through a
  bitcast to its memory order (scalar broadcasts broadcast again), the
  result bitcast back to the layout; no transpose at all, as in XLA (layout
  assignment gives elementwise chains their operands' layout);
* reshapes become bitcasts (with default layouts every reshape keeps the
  memory order), and so do transposes that only move size-1 dimensions.

Tuple-shaped instructions other than tuples, parameters and
get-tuple-elements (while loops, variadic reductions) keep their layouts.
Custom calls that run a handler on raw buffers (see custom_call_layouts)
read their operands' buffers as they are and keep their results' layouts,
like parameters.
"""

from __future__ import annotations

from ..module import HloComputation, HloInstruction
from ..shape import Shape
from .custom_call_layouts import is_handler_call
from .layout_assignment import is_layout_agnostic
from .pipeline import ComputationPass
from .util import default_layout, is_elementwise, with_default_layout

__all__ = ["LayoutNormalization", "transpose_is_bitcast"]

# Users that see a value's buffer in its layout rather than compute with
# its logical value.
_BUFFER_READERS = frozenset({"bitcast", "tuple"})


def _reads_buffer(user: HloInstruction) -> bool:
    return user.opcode in _BUFFER_READERS or is_handler_call(user)


# default_layout(rank) for the usual ranks, made once (asked for every
# instruction, twice per run).
_DEFAULT_LAYOUTS = tuple(default_layout(rank) for rank in range(9))


def _has_default_layout(shape: Shape) -> bool:
    if shape.tuple_shapes is not None:
        return all(_has_default_layout(s) for s in shape.tuple_shapes)
    layout = shape.layout
    if layout is None or shape.element_type == "token":
        return True
    rank = len(shape.dims)
    default = _DEFAULT_LAYOUTS[rank] if rank < len(_DEFAULT_LAYOUTS) else default_layout(rank)
    return (layout if layout.__class__ is tuple else tuple(layout)) == default


def _physical(shape: Shape) -> Shape:
    """The shape whose row-major order is `shape`'s memory order."""
    return with_default_layout(shape.physical_shape())


def _computes_physically(inst: HloInstruction) -> bool:
    """An elementwise instruction with a non-default layout that every
    operand shares (scalar broadcasts read alike in any layout)."""
    if inst.opcode == "copy" or not is_elementwise(inst) or inst.shape.is_tuple or \
            _has_default_layout(inst.shape):
        return False
    layout = inst.shape.minor_to_major
    return all(is_layout_agnostic(op) or
               (not op.shape.is_tuple and op.shape.rank == inst.shape.rank and
                op.shape.minor_to_major == layout)
               for op in inst.operands)


def transpose_is_bitcast(inst: HloInstruction) -> bool:
    """A transpose (default layouts) that moves only size-1 dimensions."""
    perm = inst.attrs["dimensions"]
    dims = inst.operands[0].shape.dims
    kept = [p for p in perm if dims[p] != 1]
    return kept == sorted(kept)


class LayoutNormalization(ComputationPass):
    name = "layout-normalization"

    def run_on(self, comp: HloComputation) -> bool:
        changed = self._normalize_layouts(comp)
        return self._bitcasts(comp) or changed

    def _to_logical(self, comp: HloComputation, source: HloInstruction) -> HloInstruction:
        """The value of `source` (non-default layout) in the default
        layout: bitcast to the physical order, transpose back."""
        physical = comp.add("bitcast", _physical(source.shape), [source])
        major_to_minor = tuple(reversed(source.shape.layout))
        inverse = tuple(major_to_minor.index(d) for d in range(source.shape.rank))
        return comp.add("transpose", with_default_layout(source.shape), [physical],
                        dimensions=inverse)

    def _to_physical(self, comp: HloComputation, value: HloInstruction,
                     target: Shape) -> HloInstruction:
        """`value` (default layout) as a buffer in `target`'s layout."""
        major_to_minor = tuple(reversed(target.layout))
        transposed = comp.add("transpose", _physical(target), [value],
                              dimensions=major_to_minor)
        return comp.add("bitcast", target, [transposed])

    def _physical_elementwise(self, comp: HloComputation, inst: HloInstruction,
                              on_physical_shape: set[int]) -> HloInstruction:
        """`inst` computed on its physical shape; returns the bitcast back
        to its layout that replaces it."""
        target = _physical(inst.shape)
        operands = []
        for op in inst.operands:
            if is_layout_agnostic(op) and op.opcode == "broadcast":
                # (its own shape may be normalized already: the result's
                # physical dimensions, its element type)
                shape = with_default_layout(Shape(op.shape.element_type, target.dims))
                operands.append(comp.add("broadcast", shape, [op.operands[0]], dimensions=()))
            elif is_layout_agnostic(op):   # a scalar constant of a rank-0 op
                operands.append(op)
            else:
                operands.append(comp.add("bitcast", _physical(op.shape), [op]))
        computed = comp.add_instruction(inst.clone_with(operands, shape=target),
                                        name=inst.name)
        back = comp.add("bitcast", inst.shape, [computed])
        logical_users = [u for u in inst.users
                         if not _reads_buffer(u) and id(u) not in on_physical_shape]
        inst.replace_all_uses_with(back)
        if inst is comp.root:
            comp.set_root(back)
        comp.remove_instruction(inst)
        if logical_users:
            logical = self._to_logical(comp, back)
            back.replace_all_uses_with(logical, users=logical_users)
        return back

    def _normalize_layouts(self, comp: HloComputation) -> bool:
        changed = False
        # Elementwise instructions that compute on the physical shape read
        # their operands' buffers (through a bitcast), like bitcasts do.
        on_physical_shape = {id(inst) for inst in comp.instructions
                             if _computes_physically(inst)}

        def computes(user: HloInstruction, operand: HloInstruction) -> bool:
            if _reads_buffer(user):
                return False
            return id(user) not in on_physical_shape or is_layout_agnostic(operand)

        for inst in list(comp.instructions):
            shape = inst.shape
            if shape.is_tuple or _has_default_layout(shape):
                continue
            if id(inst) in on_physical_shape:
                self._physical_elementwise(comp, inst, on_physical_shape)
                changed = True
                continue
            if inst.opcode == "bitcast":
                # The bitcast keeps its layout; users that compute read its
                # logical value in the default layout (tuples and bitcasts
                # pass the buffer on as it is).
                users = [u for u in inst.users if computes(u, inst)]
                if users or inst is comp.root:
                    logical = self._to_logical(comp, inst)
                    inst.replace_all_uses_with(logical, users=users)
                    changed = True
                continue
            if inst.opcode in ("parameter", "get-tuple-element") or is_handler_call(inst):
                users = [u for u in inst.users if computes(u, inst)]
                if users:
                    logical = self._to_logical(comp, inst)
                    inst.replace_all_uses_with(logical, users=users)
                    changed = True
                continue
            # Compute in the default layout; bitcast readers and the
            # computation's result see the old physical order.
            old_shape = inst.shape
            inst.shape = with_default_layout(old_shape)
            readers = [u for u in inst.users if not computes(u, inst)]
            if readers or inst is comp.root:
                physical = self._to_physical(comp, inst, old_shape)
                inst.replace_all_uses_with(physical, users=readers)
                if inst is comp.root:
                    comp.set_root(physical)
            changed = True
        return changed

    def _bitcasts(self, comp: HloComputation) -> bool:
        changed = False
        for inst in list(comp.instructions):
            if inst.parent is not comp:
                continue
            if inst.opcode == "copy" and not inst.shape.is_tuple and \
                    _has_default_layout(inst.shape) and \
                    _has_default_layout(inst.operands[0].shape):
                inst.replace_all_uses_with(inst.operands[0])
                if not inst.users and inst is not comp.root:
                    comp.remove_instruction(inst)
                changed = True
                continue
            bitcast_like = (inst.opcode == "reshape" or
                            inst.opcode == "transpose" and transpose_is_bitcast(inst))
            if not bitcast_like or inst.shape.is_tuple:
                continue
            if not (_has_default_layout(inst.shape) and
                    _has_default_layout(inst.operands[0].shape)):
                continue
            new = comp.add("bitcast", inst.shape, [inst.operands[0]])
            if "metadata" in inst.attrs:
                new.attrs["metadata"] = inst.attrs["metadata"]
            inst.replace_with(new)
            changed = True
        return changed

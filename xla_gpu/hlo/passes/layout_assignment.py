"""LayoutAssignment: physical layouts chosen under the constraints XLA:GPU's
layout assignment imposes, with copies where two constraints meet.

Constraints, strongest first:

* the ENTRY's parameters take the layouts of the module's
  `entry_computation_layout` (the caller's buffers are in them; jax prints
  its parameters row-major in the text and the real layouts only there),
  and the ENTRY's result is converted to the result layout given there;
* a dot's operands are laid out as cuBLAS (and the GEMM emitter's tiles)
  read them, XLA:GPU's rules:
    - s8 x s8 -> s32: the contracting dimensions of BOTH operands minor
      (cuBLAS' integer kernels take K-contiguous "TN" operands: a row-major
      [M,K] LHS and a [K,N]{0,1} RHS);
    - with batch dimensions, or several contracting or non-contracting
      dimensions: each group contiguous, batch not most minor (the layout
      the operand has when it qualifies, else the default one when that
      qualifies, else batch, contracting, non-contracting major to minor);
    - a plain matrix operand takes either order (a transpose flag);
* values whose buffer someone reads as it is (tuple elements, the root,
  bitcasts, custom-call handlers, control flow) keep their layouts.

Elementwise instructions have no constraint of their own: each gets the
layout its result must have (propagated up from a kept layout or a dot's
constraint, through single-user elementwise chains), else the layout of its
operands (propagated down). An operand in another layout is converted by a
`copy` (layout normalization makes it a transpose); scalar broadcasts and
scalar constants take any layout and are never copied.

Everything runs before layout normalization, which computes elementwise
instructions whose operands share their layout on the physical shape (no
transpose at all) and turns the copies into transposes.
"""

from __future__ import annotations

from ...errors import HloError, HloParseError
from ..module import HloComputation, HloInstruction, HloModule
from ..shape import Shape, default_layout, same_shape
from .control_flow_layouts import convert_layout
from .custom_call_layouts import is_handler_call
from .pipeline import HloPass
from .util import is_elementwise, program_computations

__all__ = ["LayoutAssignment", "entry_computation_layout", "dot_operand_layout",
           "is_layout_agnostic"]


def entry_computation_layout(module: HloModule) -> tuple[list[Shape], Shape] | None:
    """The header's `entry_computation_layout={(params...)->result}` as
    (parameter shapes, result shape); None when the header has none. Their
    layouts only: a memory space there (`{0:S(5)}`, a parameter or result
    the caller keeps in host memory) is the caller's to place (xla_gpu.pjrt
    moves them), and the program reads and writes device memory."""
    raw = module.attrs.get("entry_computation_layout")
    if raw is None:
        return None
    from ..parser import parse_program_shape
    try:
        params, result = parse_program_shape(str(raw), "entry_computation_layout")
    except (HloParseError, ValueError) as e:
        raise HloError(f"module '{module.name}': malformed entry_computation_layout "
                       f"{raw!r}: {e}") from None
    return [_in_device_memory(p) for p in params], _in_device_memory(result)


def _in_device_memory(shape: Shape) -> Shape:
    if shape.is_tuple:
        return Shape(tuple_shapes=tuple(_in_device_memory(s) for s in shape.tuple_shapes))
    return shape.in_memory_space(0) if shape.memory_space else shape


# ------------------------------------------------------------------ dots

def _layout_from_major_to_minor(order: list[int]) -> tuple[int, ...]:
    return tuple(reversed(order))


def _groups_contiguous(shape: Shape, groups: list[tuple[int, ...]]) -> bool:
    """Whether each non-empty group of dimensions occupies consecutive
    physical positions in its logical order, and the first group (batch)
    is not the most minor one: the layouts a strided matrix (with a batch
    stride) describes."""
    position = {d: i for i, d in enumerate(shape.major_to_minor)}
    spans = []
    for index, group in enumerate(groups):
        if not group:
            continue
        places = [position[d] for d in group]
        if places != list(range(places[0], places[0] + len(places))):
            return False
        spans.append((places[0], index))
    if groups[0] and len(spans) > 1 and max(spans)[1] == 0:
        return False   # the batch group is the most minor one
    return True


def _dot_groups(dot: HloInstruction, operand: int) -> tuple[tuple[int, ...], ...]:
    side = "lhs" if operand == 0 else "rhs"
    rank = dot.operands[operand].shape.rank
    batch = tuple(dot.attrs.get(f"{side}_batch_dims") or ())
    contracting = tuple(dot.attrs.get(f"{side}_contracting_dims") or ())
    free = tuple(d for d in range(rank) if d not in batch and d not in contracting)
    return batch, contracting, free


def _is_s8_to_s32(dot: HloInstruction) -> bool:
    return dot.shape.element_type == "s32" and \
        all(op.shape.element_type == "s8" for op in dot.operands)


def dot_operand_layout(dot: HloInstruction, operand: int) -> tuple[int, ...] | None:
    """The layout (minor-to-major) XLA:GPU's rules require of the dot's
    operand, None when any layout will do (or when the operand's own one
    qualifies, which is then returned)."""
    shape = dot.operands[operand].shape
    if shape.is_tuple or shape.rank == 0:
        return None
    batch, contracting, free = _dot_groups(dot, operand)
    current = shape.minor_to_major
    if _is_s8_to_s32(dot):
        minor = set(current[:len(contracting)])
        if minor == set(contracting) and \
                _groups_contiguous(shape, [batch, free, contracting]):
            return current
        return _layout_from_major_to_minor([*batch, *free, *contracting])
    if batch or len(contracting) > 1 or len(free) > 1:
        if _groups_contiguous(shape, [batch, contracting, free]):
            return current
        default = Shape(shape.element_type, shape.dims, default_layout(shape.rank))
        if _groups_contiguous(default, [batch, contracting, free]):
            return default.minor_to_major
        return _layout_from_major_to_minor([*batch, *contracting, *free])
    return None


# ----------------------------------------------------------- the pass

def is_layout_agnostic(inst: HloInstruction) -> bool:
    """Values with the same element everywhere (scalar broadcasts, scalar
    constants): any layout reads them alike, so they are never copied."""
    if inst.shape.is_tuple:
        return False
    if inst.opcode == "broadcast" and inst.operands and inst.operands[0].shape.rank == 0:
        return True
    return inst.opcode == "constant" and inst.shape.rank == 0


def _is_elementwise(inst: HloInstruction) -> bool:
    """Elementwise on operands of its own rank (what takes a layout from its
    operands or users); copies convert layouts and maps are left alone."""
    if not is_elementwise(inst) or inst.opcode in ("copy", "map"):
        return False
    if inst.shape.is_tuple or inst.shape.element_type == "token":
        return False
    return all(not op.shape.is_tuple and op.shape.rank == inst.shape.rank
               for op in inst.operands)


def _reads_buffer(user: HloInstruction) -> bool:
    """A user that sees its operand's buffer in the operand's layout."""
    return user.opcode in ("tuple", "bitcast", "while", "conditional", "call",
                           "custom-call", "fusion", "async-start") or is_handler_call(user)


def _with_layout(shape: Shape, layout: tuple[int, ...]) -> Shape:
    return Shape(shape.element_type, tuple(shape.dims), tuple(layout))


class LayoutAssignment(HloPass):
    """See the module docstring. `copies` counts the copies the last run
    inserted (the number compared with XLA's in CONFORMANCE.md)."""
    name = "layout-assignment"

    def __init__(self) -> None:
        self.copies = 0

    def run(self, module: HloModule) -> bool:
        module.link()
        self.copies = 0
        layout = entry_computation_layout(module)
        changed = layout is not None and self._entry_parameters(module, layout[0])
        changed |= layout is not None and self._entry_result_producers(module, layout[1])
        for comp in program_computations(module):
            changed |= self._element_reads(comp)
        for comp in program_computations(module):
            changed |= self._assign(comp)
        changed |= layout is not None and self._entry_result(module, layout[1])
        return changed

    # ------------------------------------------------------- the ENTRY

    def _entry_parameters(self, module: HloModule, params: list[Shape]) -> bool:
        entry = module.entry
        if len(params) != len(entry.parameters):
            raise HloError(f"module '{module.name}': entry_computation_layout lists "
                           f"{len(params)} parameter(s); its ENTRY '{entry.name}' has "
                           f"{len(entry.parameters)}")
        changed = False
        for param, wanted in zip(entry.parameters, params):
            if not same_shape(param.shape, wanted, layouts=False):
                raise param.error(f"entry_computation_layout gives it {wanted}; it is "
                                  f"{param.shape}")
            if same_shape(param.shape, wanted):
                continue
            declared, param.shape = param.shape, wanted
            self._keep_readers(param, declared)
            changed = True
        return changed

    def _element_reads(self, comp: HloComputation) -> bool:
        """A get-tuple-element is the element's buffer: one stated in
        another layout than the tuple's element (hand-written text, or a
        tuple whose layouts changed) takes the element's, and its readers
        get a converted copy where they read the buffer."""
        changed = False
        for inst in list(comp.instructions):
            if inst.opcode != "get-tuple-element" or not inst.operands[0].shape.is_tuple:
                continue
            element = inst.operands[0].shape.tuple_shapes[inst.attrs["index"]]
            if not element.is_tuple and not same_shape(inst.shape, element):
                old, inst.shape = inst.shape, element
                self._keep_readers(inst, old)
                changed = True
        return changed

    def _keep_readers(self, inst: HloInstruction, declared: Shape) -> None:
        """`inst` changed layouts; users that read its buffer were written
        for `declared` and read a converted copy (element reads take the
        new layout and pass the question on)."""
        comp = inst.parent
        back = None
        for user in list(inst.users):
            if user.opcode == "get-tuple-element" and inst.shape.is_tuple:
                element = inst.shape.tuple_shapes[user.attrs["index"]]
                if not same_shape(user.shape, element):
                    old, user.shape = user.shape, element
                    self._keep_readers(user, old)
                continue
            if user.opcode == "tuple":
                # A tuple groups buffers as they are: its element takes the
                # new layout and its own users are asked in turn (the
                # ENTRY's result is converted once, at the end).
                old = user.shape
                user.shape = Shape("", (), None, tuple(op.shape for op in user.operands))
                if not same_shape(old, user.shape):
                    self._keep_readers(user, old)
                continue
            if user.opcode in ("opt-barrier", "optimization-barrier"):
                # A remat's barrier passes its tuple's buffers through as
                # they are: it takes the new layouts, its readers are asked.
                old, user.shape = user.shape, inst.shape
                if not same_shape(old, user.shape):
                    self._keep_readers(user, old)
                continue
            if not _reads_buffer(user):
                continue   # computes with the logical value: any layout
            if back is None:
                back = self._convert(comp, inst, declared)
            user.replace_uses_of(inst, back)

    def _entry_result_producers(self, module: HloModule, result: Shape) -> bool:
        """Elementwise instructions that only the ENTRY's result reads are
        computed in the result's layout (no copy after them)."""
        root = module.entry.root
        if not same_shape(root.shape, result, layouts=False):
            return False   # reported by _entry_result
        if not root.shape.is_tuple:
            if _is_elementwise(root) and not root.users and \
                    not same_shape(root.shape, result):
                root.shape = result
                return True
            return False
        if root.opcode != "tuple":
            return False
        changed = False
        for index, operand in enumerate(root.operands):
            target = result.tuple_shapes[index]
            if target.is_tuple or same_shape(operand.shape, target):
                continue
            if _is_elementwise(operand) and operand.users == [root] and \
                    root.operands.count(operand) == 1:
                operand.shape = target
                changed = True
        if changed:
            root.shape = Shape("", (), None, tuple(op.shape for op in root.operands))
        return changed

    def _entry_result(self, module: HloModule, result: Shape) -> bool:
        entry = module.entry
        root = entry.root
        if not same_shape(root.shape, result, layouts=False):
            raise root.error(f"entry_computation_layout gives the result {result}; the "
                             f"root is {root.shape}")
        converted = self._convert(entry, root, result)
        if converted is root:
            return False
        entry.set_root(converted)
        return True

    def _convert(self, comp: HloComputation, value: HloInstruction,
                 target: Shape) -> HloInstruction:
        before = len(comp.instructions)
        converted = convert_layout(comp, value, target)
        self.copies += sum(1 for inst in comp.instructions[before:] if inst.opcode == "copy")
        return converted

    # ------------------------------------------------- one computation

    def _assign(self, comp: HloComputation) -> bool:
        changed = False
        order = comp.post_order()
        # Which instructions are elementwise, asked once each (the answer
        # reads opcodes, ranks and element types, which no step here
        # changes).
        ew = {id(inst) for inst in order if _is_elementwise(inst)}
        # Layouts elementwise instructions are asked for from above: kept
        # layouts (buffer readers, the root) and dots' operand constraints.
        wanted: dict[int, tuple[int, ...]] = {}
        fixed: set[int] = set()
        for inst in order:
            if id(inst) in ew and (inst is comp.root or
                                          any(_reads_buffer(u) for u in inst.users)):
                fixed.add(id(inst))
        for inst in reversed(order):
            if id(inst) in fixed:
                self._ask_operands(inst, inst.shape.minor_to_major, wanted, fixed, ew)
            elif id(inst) in wanted:
                self._ask_operands(inst, wanted[id(inst)], wanted, fixed, ew)
            if inst.opcode == "dot":
                for k in range(2):
                    layout = dot_operand_layout(inst, k)
                    if layout is not None:
                        self._ask_dot_operand(inst, k, layout, wanted, fixed, ew)
        # Down: each elementwise instruction in the layout it was asked for,
        # else its operands' (the first operand with a real layout).
        for inst in order:
            if id(inst) not in ew or inst.parent is not comp:
                continue
            if id(inst) in fixed:
                layout = inst.shape.minor_to_major
            elif id(inst) in wanted:
                layout = wanted[id(inst)]
            else:
                real = [op for op in inst.operands if not is_layout_agnostic(op)]
                layout = (real[0] if real else inst).shape.minor_to_major
            if inst.shape.minor_to_major != layout:
                inst.shape = _with_layout(inst.shape, layout)
                changed = True
            for k in range(len(inst.operands)):
                changed |= self._give_operand(inst, k, layout)
        # Dots last: their operands' producers have their layouts now.
        for inst in order:
            if inst.opcode == "dot" and inst.parent is comp:
                for k in range(2):
                    layout = dot_operand_layout(inst, k)
                    if layout is not None:
                        changed |= self._give_operand(inst, k, layout)
        return changed

    def _ask_operands(self, inst: HloInstruction, layout: tuple[int, ...],
                      wanted: dict[int, tuple[int, ...]], fixed: set[int],
                      ew: set[int]) -> None:
        """Up: an elementwise instruction's operands are asked for its
        layout; an elementwise operand that only it uses takes it. `ew`:
        the ids of the elementwise instructions."""
        if id(inst) not in ew:
            return
        for operand in inst.operands:
            if id(operand) in ew and id(operand) not in fixed and \
                    len(operand.users) == 1 and id(operand) not in wanted:
                wanted[id(operand)] = layout

    def _ask_dot_operand(self, dot: HloInstruction, index: int, layout: tuple[int, ...],
                         wanted: dict[int, tuple[int, ...]], fixed: set[int],
                         ew: set[int]) -> None:
        """Up from a dot: an elementwise operand only the dot reads is
        computed in the layout the dot needs (no copy between them)."""
        operand = dot.operands[index]
        if id(operand) in ew and id(operand) not in fixed and \
                len(operand.users) == 1:
            wanted.setdefault(id(operand), layout)

    def _give_operand(self, user: HloInstruction, index: int,
                      layout: tuple[int, ...]) -> bool:
        """`user` reads operand `index` in `layout`: a copy converts it when
        it has another (scalar broadcasts and constants take the layout)."""
        operand = user.operands[index]
        if operand.shape.is_tuple or operand.shape.element_type == "token" or \
                operand.shape.minor_to_major == layout:
            return False
        if is_layout_agnostic(operand):
            if len(operand.users) == 1 and not any(_reads_buffer(u) for u in operand.users):
                operand.shape = _with_layout(operand.shape, layout)
                return True
            return False
        comp = user.parent
        copy = comp.add("copy", _with_layout(operand.shape, layout), [operand],
                        name=f"{operand.name}.relayout")
        user.replace_operand_with(index, copy)
        self.copies += 1
        return True

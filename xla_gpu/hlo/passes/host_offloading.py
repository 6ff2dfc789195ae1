"""Host offloading: a value jax places in host memory inside a program
(`jax.device_put(x, memory_kind="pinned_host")` in a jitted function, or
a remat policy that offloads residuals) and moves back to the device
later lives in host memory in between, so it takes no device memory while
the program does other work, as XLA:GPU's host offloading does.

jax states each move as `annotate_device_placement` with the memory it
wants (`_xla_buffer_placement`). Two steps, as XLA's:

  HostOffloadMarker    (after call inlining: a remat's moves may sit in two
                       calls) a placement in host memory whose value only
                       comes back to the device becomes a `MoveToHost`
                       custom call, the placements that bring it back
                       `MoveToDevice` calls: custom calls with a side
                       effect (as jax marks them) that no pass merges, fuses
                       or looks through, so the value between them stays
                       itself. Any other placement is the value itself (the
                       program's results are placed by the caller,
                       xla_gpu.pjrt, from jax's memory kinds).
  HostOffloader        (after fusion) each `MoveToHost` becomes a copy into
                       memory space 5 (`f32[..]{..:S(5)}`), each
                       `MoveToDevice` a copy back: plain copies (a memcpy
                       thunk each, never a kernel), and buffer assignment
                       puts the values of memory space 5 in a host
                       allocation of their own.

Values never change: a copy in either memory is the same bytes. What moves
is where they live between the two copies."""

from __future__ import annotations

from ..module import HloComputation, HloInstruction, HloModule
from ..shape import HOST_MEMORY_SPACE, Shape, same_shape
from .pipeline import HloPass

__all__ = ["HostOffloader", "HostOffloadMarker", "mark_host_offloads", "MOVE_TO_HOST",
           "MOVE_TO_DEVICE", "PLACEMENT_TARGET", "has_host_moves", "is_placement"]

PLACEMENT_TARGET = "annotate_device_placement"
PLACEMENT_KEY = "_xla_buffer_placement"
HOST_PLACEMENTS = frozenset({"pinned_host", "unpinned_host"})
MOVE_TO_HOST = "MoveToHost"
MOVE_TO_DEVICE = "MoveToDevice"


def _target(inst: HloInstruction) -> str | None:
    return inst.attrs.get("custom_call_target") if inst.opcode == "custom-call" else None


def _placement(inst: HloInstruction) -> str | None:
    """The memory an annotate_device_placement call asks for; None for any
    other instruction."""
    if _target(inst) != PLACEMENT_TARGET:
        return None
    attrs = inst.attrs.get("frontend_attributes")
    return attrs.get(PLACEMENT_KEY) if isinstance(attrs, dict) else None


def is_placement(inst: HloInstruction) -> bool:
    """An annotate_device_placement call (a memory placement jax states)."""
    return _target(inst) == PLACEMENT_TARGET


# How deep a value is followed through tuples and barriers.
_MAX_HOPS = 16


def _returns(value: HloInstruction, index: tuple[int, ...], hops: int = 0
             ) -> list[HloInstruction] | None:
    """The device placements that take `value`'s leaf `index` (() for an
    array) back to the device, followed through what only passes it on
    (tuple, get-tuple-element, opt-barrier: a remat's residuals go through
    one); None when some other instruction reads it, or it leaves the
    computation (its root: a result, a loop's state)."""
    if hops > _MAX_HOPS or value is value.parent.root:
        return None
    found: list[HloInstruction] = []
    for user in value.users:
        if not index and _placement(user) == "device":
            if user.operands != [value] or user.shape.is_tuple:
                return None
            found.append(user)
            continue
        if user.opcode == "tuple":
            paths = [_returns(user, (k, *index), hops + 1)
                     for k, o in enumerate(user.operands) if o is value]
        elif user.opcode in ("opt-barrier", "optimization-barrier"):
            paths = [_returns(user, index, hops + 1)]
        elif user.opcode == "get-tuple-element" and index:
            if user.attrs["index"] != index[0]:
                continue   # another element
            paths = [_returns(user, index[1:], hops + 1)]
        else:
            return None
        for path in paths:
            if path is None:
                return None
            found += path
    return found


def mark_host_offloads(comp: HloComputation) -> int:
    """Renames each host placement of an array in `comp` whose value only
    comes back to the device (and those placements) to MoveToHost /
    MoveToDevice. Returns how many values are offloaded."""
    count = 0
    for inst in comp.instructions:
        if _placement(inst) not in HOST_PLACEMENTS or inst.shape.is_tuple or \
                len(inst.operands) != 1 or not inst.users:
            continue
        back = _returns(inst, ())
        if not back:
            continue
        inst.attrs["custom_call_target"] = MOVE_TO_HOST
        for user in back:
            user.attrs["custom_call_target"] = MOVE_TO_DEVICE
        count += 1
    return count


def has_host_moves(module: HloModule) -> bool:
    return any(_target(i) in (MOVE_TO_HOST, MOVE_TO_DEVICE)
               for c in module.computations for i in c.instructions)


class HostOffloadMarker(HloPass):
    """Marks the offloads (mark_host_offloads) and makes every other
    placement the value it places."""
    name = "host-offload-marker"

    def run(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computations:
            if mark_host_offloads(comp):
                changed = True
            for inst in list(comp.instructions):
                if inst.parent is comp and is_placement(inst):
                    if len(inst.operands) != 1:
                        raise inst.error("a memory placement takes one operand")
                    inst.replace_with(inst.operands[0])
                    changed = True
        return changed


class HostOffloader(HloPass):
    name = "host-offloader"

    def run(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computations:
            for inst in list(comp.instructions):
                target = _target(inst)
                if target not in (MOVE_TO_HOST, MOVE_TO_DEVICE) or inst.parent is not comp:
                    continue
                if len(inst.operands) != 1 or inst.shape.is_tuple:
                    raise inst.error(f"{target} takes one array operand")
                operand = inst.operands[0]
                space = HOST_MEMORY_SPACE if target == MOVE_TO_HOST else 0
                # In the operand's layout: a move changes where the bytes
                # are, not their order (a memcpy).
                moved = comp.add_instruction(HloInstruction.create(
                    "copy", operand.shape.in_memory_space(space), [operand], name=inst.name))
                if target == MOVE_TO_DEVICE and not same_shape(moved.shape, inst.shape):
                    # The users read it in another layout: relaid on the device.
                    moved = comp.add_instruction(HloInstruction.create(
                        "copy", inst.shape.in_memory_space(0), [moved],
                        name=f"{inst.name}.relayout"))
                inst.replace_with(moved)
                changed = True
        if changed:
            for comp in module.computations:
                _restate_memory_spaces(comp)
        return changed


def _restate_memory_spaces(comp: HloComputation) -> None:
    """The tuples, get-tuple-elements and barriers that pass an offloaded
    value on state its memory space, as the copy that made it does."""
    for inst in comp.instructions:   # operands before users
        op = inst.opcode
        if op == "tuple":
            elements = tuple(o.shape for o in inst.operands)
            if elements != inst.shape.tuple_shapes:
                inst.shape = Shape("", (), None, elements)
        elif op in ("opt-barrier", "optimization-barrier"):
            if inst.operands[0].shape != inst.shape:
                inst.shape = inst.operands[0].shape
        elif op == "get-tuple-element":
            element = inst.operands[0].shape.tuple_shapes[inst.attrs["index"]]
            if element.memory_space != inst.shape.memory_space:
                inst.shape = element

"""LoopStateOrdering: in every while body, the instruction that writes loop
state element k runs after the other readers of element k's previous value,
so that the new value can take the old one's buffer (XLA adds these control
edges when it removes the copies copy insertion would otherwise need).
Where that cannot be (the writer reads the old value at other elements, or
a reader of the old value needs the new one), the new value is copied into
the state after the last reader instead, as XLA's copy insertion does.

Runs on the program the thunk emitter takes (after copy insertion), before
scheduling and buffer assignment.
"""

from __future__ import annotations

from ...service.alias_analysis import elementwise_share_pairs, in_place_pairs
from ..collectives import ASYNC_COLLECTIVE_DONES
from ..graph import reachable
from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction, HloModule
from .pipeline import HloPass
from .util import free_name

__all__ = ["LoopStateOrdering", "order_loop_state_updates"]

_ASYNC_DONES = frozenset(ASYNC_COLLECTIVE_DONES.values())
_BARRIERS = ("opt-barrier", "optimization-barrier")


class LoopStateOrdering(HloPass):
    name = "loop-state-ordering"

    def run(self, module: HloModule) -> bool:
        return order_loop_state_updates(module) > 0


def _ancestors(inst: HloInstruction, by_name: dict[str, HloInstruction]) -> set[int]:
    """ids of every instruction `inst` depends on (operands and control
    predecessors, transitively), itself included."""
    def deps(node: HloInstruction) -> list[HloInstruction]:
        preds = [by_name[n] for n in node.attrs.get(CONTROL_PREDECESSORS) or () if n in by_name]
        return [*node.operands, *preds]

    return {id(node) for node in reachable([inst], deps)}


def order_loop_state_updates(module: HloModule) -> int:
    """In every while body, the instruction writing loop state element k
    runs after the other readers of element k's previous value (XLA adds
    these control edges when it removes the copies copy insertion would
    need): then the new value can take the old one's buffer. Where that
    cannot be (the writer reads the old value at other elements, or a
    reader of the old value needs the new one), the new value is copied into
    the state after the last reader, as XLA's copy insertion does. Returns
    the number of control edges added."""
    added = 0
    for comp in module.reachable_computations():
        for loop in comp.instructions:
            if loop.opcode != "while":
                continue
            body: HloComputation = loop.attrs["body"]
            if not body.parameters or body.root is None:
                continue
            param = body.parameters[0]
            by_name = {i.name: i for i in body.instructions}
            if body.root.opcode == "custom-call" and body.root.shape.is_tuple:
                _take_apart_root(body, by_name)
            if body.root.opcode != "tuple":
                # An array loop state: the root writes the parameter's buffer.
                if not body.root.shape.is_tuple and body.root is not param:
                    added += _order_element(body, by_name, [param], body.root, None)
                continue
            for k, value in enumerate(list(body.root.operands)):
                old = [g for g in param.users
                       if g.opcode == "get-tuple-element" and g.attrs.get("index") == k]
                if old and value not in old and not value.shape.is_tuple and \
                        value.shape.element_type != "token":   # (no buffer)
                    added += _order_element(body, by_name, old, value, k)
    return added


def _take_apart_root(body: HloComputation, by_name: dict[str, HloInstruction]) -> None:
    """A body whose root computes the whole new state (a custom call's
    tuple: an ordered io_callback's token and value; the tuple simplifier
    folds tuple(gte(call, 0), ...) into it) gets a root tuple of its
    elements, so that each element can be ordered or copied on its own."""
    root = body.root
    parts = []
    for k, shape in enumerate(root.shape.tuple_shapes):
        part = HloInstruction(free_name(by_name, f"{root.name}.element"), "get-tuple-element",
                              shape, [root], {"index": k}, None, None, root.location)
        _append(body, by_name, part)
        root.users.append(part)
        parts.append(part)
    state = HloInstruction(free_name(by_name, f"{root.name}.state"), "tuple", root.shape,
                           parts, {}, None, None, root.location)
    _append(body, by_name, state)
    for part in parts:
        part.users = [state]
    body.set_root(state)


def _append(body: HloComputation, by_name: dict[str, HloInstruction],
            inst: HloInstruction) -> None:
    body.instructions.append(inst)
    by_name[inst.name] = inst
    inst.parent = body


def _order_element(body: HloComputation, by_name: dict[str, HloInstruction],
                   old: list[HloInstruction], value: HloInstruction, k: int | None) -> int:
    """Orders the writer of one loop state element (`value`, the root's
    operand k; the root itself for an array state, k None) after the other
    readers of its previous value (`old`), or copies it into the state
    after them. Returns the number of control edges added."""
    param = body.parameters[0]
    passing = ("get-tuple-element", "bitcast") if k is not None else ("bitcast",)
    writer = value
    while writer.opcode in passing and writer not in old and writer is not param:
        writer = writer.operands[0]
    if writer.opcode in _ASYNC_DONES and writer.operands:
        # An async collective's value is written by its start.
        writer = writer.operands[0]
    if writer in old or writer is param or writer.opcode in ("parameter", "constant"):
        return 0
    # The root tuple reads nothing itself; an array state's root is the writer.
    state_root = body.root if k is not None else None
    readers: list[HloInstruction] = []
    old_values = list(old)
    # (an instruction that holds the old value, where in it: () the value
    # itself, (i, ...) tuple element i of it)
    stack: list[tuple[HloInstruction, tuple[int, ...]]] = [(o, ()) for o in old]
    while stack:
        current, index = stack.pop()
        for user in current.users:
            if user.opcode == "bitcast" and not index:
                stack.append((user, ()))
                old_values.append(user)
            elif user.opcode == "tuple" and user is not state_root:
                # A tuple reads nothing: its element is followed (whoever
                # takes the tuple, an inner loop or a call, reads it).
                stack.extend((user, (k, *index)) for k, operand in enumerate(user.operands)
                             if operand is current)
            elif user.opcode in _BARRIERS:
                # A remat's barrier passes its tuple through: its element
                # reads are reads of the old value.
                stack.append((user, index))
            elif user.opcode == "get-tuple-element" and index:
                if user.attrs["index"] == index[0]:
                    stack.append((user, index[1:]))
                    if len(index) == 1:
                        old_values.append(user)
            elif user is not state_root and user not in readers:
                readers.append(user)
    shareable = {i for i, _, _ in in_place_pairs(writer)} | \
        {i for i, _, _ in elementwise_share_pairs(writer)}
    self_read = writer in readers and not all(
        i in shareable for i, o in enumerate(writer.operands)
        if any(o is v for v in old_values))
    others = [r for r in readers if r is not writer]
    # Each reader's ancestors walked once: the readers that need the new
    # value both force the copy and need no edge.
    after = {id(r) for r in others if id(writer) in _ancestors(r, by_name)}
    if self_read or after:
        copy = HloInstruction(free_name(by_name, f"{value.name}.state_copy"),
                              "copy", value.shape, [value], {}, None, None, value.location)
        _append(body, by_name, copy)
        if k is not None:
            body.root.operands[k] = copy
            copy.users = [body.root]
            value.users = [u for u in value.users if u is not body.root] + [copy]
        else:
            value.users = [*value.users, copy]
            body.set_root(copy)
        # The fresh copy has no user but the root: no reader can depend on it.
        writer, others, after = copy, readers, set()
    added = 0
    for reader in others:
        if id(reader) in after:
            continue
        names = tuple(writer.attrs.get(CONTROL_PREDECESSORS) or ())
        if reader.name in names:
            continue
        writer.attrs[CONTROL_PREDECESSORS] = names + (reader.name,)
        if hasattr(body, "_control_edges"):
            body._control_edges = True
        added += 1
    return added

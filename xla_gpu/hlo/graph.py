"""The depth-first walk every HLO graph order is built on: instructions
through their operands (and control predecessors), computations through the
computations they call. Iterative, so that fusions of thousands of
instructions and long call chains never reach Python's recursion limit.

    post_order([root], lambda i: i.operands)          # operands first
    post_order([entry], called_by)                     # callees first
    reachable([root], lambda i: i.operands)            # what root depends on
    through_bitcasts(value)                            # the buffer's producer
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence, TypeVar

__all__ = ["needs", "post_order", "reachable", "through_bitcasts"]

Node = TypeVar("Node")


def post_order(starts: Iterable[Node], successors: Callable[[Node], Sequence[Node]],
               on_cycle: Callable[[Node], None] | None = None) -> list[Node]:
    """Every node reachable from `starts`, each listed once and after every
    successor it reaches: a depth-first post-order that takes the starts,
    and each node's successors, in the order given. Nodes are told apart by
    identity. An edge back to a node whose successors are still being
    walked closes a cycle: `on_cycle(node)` is called with that node (raise
    there to refuse cycles); without `on_cycle` the edge is ignored."""
    done: set[int] = set()
    active: set[int] = set()
    order: list[Node] = []
    # The walk keeps, per node on the path from the start, the iterator
    # over its successors (fetched when the node is entered), and resumes
    # the innermost one: each successor is looked at in order, when the
    # ones before it are finished.
    for start in starts:
        key = id(start)
        if key in done:
            continue
        active.add(key)
        path = [start]
        nexts = [iter(successors(start))]
        while nexts:
            for node in nexts[-1]:
                key = id(node)
                if key in done:
                    continue
                if key in active:
                    if on_cycle is not None:
                        on_cycle(node)
                    continue
                active.add(key)
                path.append(node)
                nexts.append(iter(successors(node)))
                break
            else:
                node = path.pop()
                nexts.pop()
                key = id(node)
                active.discard(key)
                done.add(key)
                order.append(node)
    return order


def reachable(starts: Iterable[Node], successors: Callable[[Node], Sequence[Node]]
              ) -> list[Node]:
    """Every node reachable from `starts` (the starts included), each
    listed once, in depth-first pre-order: the starts, and each node's
    successors, in the order given. Nodes are told apart by identity."""
    seen: set[int] = set()
    order: list[Node] = []
    stack = list(starts)[::-1]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        nexts = successors(node)
        for k in range(len(nexts) - 1, -1, -1):
            if id(nexts[k]) not in seen:
                stack.append(nexts[k])
    return order


def through_bitcasts(inst, keep_elements: bool = False):
    """The instruction below `inst`'s chain of bitcasts (`inst` itself when
    it is no bitcast). Two meanings:

    * `keep_elements=False`: below every bitcast, whatever shape, layout or
      element type of the same size it gives the bytes: the instruction
      whose buffer `inst` is (a bitcast moves no byte). What buffer
      questions ask: who else reads these bytes, are they a constant's or
      a parameter's.
    * `keep_elements=True`: below the bitcasts between two row-major shapes
      of one element type only, the reshapes of the same elements: the
      instruction returned holds `inst`'s elements, element i (row-major
      linear index) where `inst` has element i. What a kernel that writes
      one through the other needs (an in-place update's window written
      through the bitcasts above it, see `xla_gpu.hlo.in_place`): a
      bitcast that changes the layout or the element type stops there.
    """
    while inst.opcode == "bitcast" and inst.operands:
        operand = inst.operands[0]
        if keep_elements and not (
                inst.shape.is_row_major and operand.shape.is_row_major and
                inst.shape.element_type == operand.shape.element_type):
            break
        inst = operand
    return inst


def needs(inst) -> list:
    """What an instruction runs after: its operands and control
    predecessors."""
    return [*inst.operands, *inst.control_predecessors()]

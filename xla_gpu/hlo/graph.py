"""The depth-first walk every HLO graph order is built on: instructions
through their operands (and control predecessors), computations through the
computations they call. Iterative, so that fusions of thousands of
instructions and long call chains never reach Python's recursion limit.

    post_order([root], lambda i: i.operands)          # operands first
    post_order([entry], called_by)                     # callees first
    reachable([root], lambda i: i.operands)            # what root depends on
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence, TypeVar

__all__ = ["post_order", "reachable"]

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
    for start in starts:
        if id(start) in done:
            continue
        stack: list[tuple[Node, bool]] = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            key = id(node)
            if expanded:
                active.discard(key)
                done.add(key)
                order.append(node)
                continue
            if key in done:
                continue
            if key in active:
                if on_cycle is not None:
                    on_cycle(node)
                continue
            active.add(key)
            stack.append((node, True))
            nexts = successors(node)
            for k in range(len(nexts) - 1, -1, -1):
                if id(nexts[k]) not in done:
                    stack.append((nexts[k], False))
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

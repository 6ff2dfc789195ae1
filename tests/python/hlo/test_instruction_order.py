"""The order a computation restores after mutations (`comp.instructions`
once marked unordered): a stable topological sort, which is the depth-first
post-order of the current list over operands and control predecessors (the
order is kept wherever it is valid). The sort skips the walk for what is
already in place; these tests hold it to the plain walk on lists that are
partly in order, partly not, with and without control edges."""

from __future__ import annotations

import random

import pytest

from xla_gpu.hlo import HloError
from xla_gpu.hlo.graph import post_order
from xla_gpu.hlo.module import CONTROL_PREDECESSORS, HloComputation, HloInstruction
from xla_gpu.hlo.shape import Shape

SCALAR = Shape("f32", ())


def _random_computation(rng: random.Random, size: int,
                        control: bool) -> tuple[HloComputation, list[HloInstruction]]:
    """A random DAG (instructions in a valid order) and that order."""
    insts: list[HloInstruction] = []
    for k in range(size):
        if k < 3 or rng.random() < 0.1:
            inst = HloInstruction.create_parameter(len([i for i in insts
                                                        if i.opcode == "parameter"]),
                                                   SCALAR, f"p{k}")
        else:
            operands = rng.sample(insts, rng.choice((1, 2, 2, 3)))
            inst = HloInstruction.create("add" if len(operands) == 2 else "tuple",
                                         SCALAR, operands, f"i{k}")
            if control and rng.random() < 0.15:
                preds = rng.sample(insts, 2)
                inst.attrs[CONTROL_PREDECESSORS] = tuple(p.name for p in preds)
        insts.append(inst)
    comp = HloComputation("c", list(insts), insts[-1]).link_instructions()
    return comp, insts


def _reference(insts: list[HloInstruction]) -> list[HloInstruction]:
    by_name = {i.name: i for i in insts}

    def deps(inst):
        preds = [by_name[n] for n in inst.attrs.get(CONTROL_PREDECESSORS) or ()]
        return [*inst.operands, *preds]
    return post_order(insts, deps)


def _scrambled(rng: random.Random, insts: list[HloInstruction]) -> list[HloInstruction]:
    """Mostly in order: a few instructions moved elsewhere (as a rewrite
    appends new instructions and rewires users), sometimes many."""
    order = list(insts)
    for _ in range(rng.choice((1, 3, len(order)))):
        inst = order.pop(rng.randrange(len(order)))
        order.insert(rng.randrange(len(order) + 1), inst)
    return order


@pytest.mark.parametrize("control", [False, True])
def test_restored_order_is_the_depth_first_post_order(control):
    rng = random.Random(7)
    for _ in range(200):
        comp, insts = _random_computation(rng, rng.randrange(4, 40), control)
        order = _scrambled(rng, insts)
        comp.instructions = order            # marks the order to be restored
        expected = _reference(order)
        assert [i.name for i in comp.instructions] == [i.name for i in expected]


def test_a_valid_order_is_kept_as_it_is():
    rng = random.Random(3)
    comp, insts = _random_computation(rng, 50, control=True)
    comp.instructions = list(insts)
    assert comp.instructions == insts


def test_a_cycle_is_refused():
    a = HloInstruction.create_parameter(0, SCALAR, "a")
    b = HloInstruction.create("negate", SCALAR, [a], "b")
    c = HloInstruction.create("negate", SCALAR, [b], "c")
    comp = HloComputation("c", [a, b, c], c).link_instructions()
    b.replace_operand_with(0, c)   # b reads c, which reads b
    with pytest.raises(HloError, match="cycle in the instruction graph"):
        comp.instructions


def _recursive_post_order(starts, successors, on_cycle=None):
    """`post_order` as its definition reads: visit each start; visiting a
    node visits its successors in order, then lists it."""
    done, active, order = set(), set(), []

    def visit(node):
        if id(node) in done:
            return
        if id(node) in active:
            if on_cycle is not None:
                on_cycle(node)
            return
        active.add(id(node))
        for s in successors(node):
            visit(s)
        active.discard(id(node))
        done.add(id(node))
        order.append(node)

    for start in starts:
        visit(start)
    return order


@pytest.mark.parametrize("seed", range(40))
def test_post_order_walks_as_its_definition(seed):
    """The iterative walk against the recursive one on random graphs with
    repeated edges, self loops and cycles: the same order, the same
    successors asked in the same order, the same cycle edges reported."""
    rng = random.Random(seed)
    size = rng.choice((1, 5, 30, 120))
    nodes = [object() for _ in range(size)]
    edges = {id(n): [rng.choice(nodes) for _ in range(rng.choice((0, 1, 2, 3, 5)))]
             for n in nodes}
    starts = [rng.choice(nodes) for _ in range(rng.choice((1, 3, size)))]
    logs = []
    for walk in (post_order, _recursive_post_order):
        log = []

        def successors(node, log=log):
            log.append(("successors", id(node)))
            return edges[id(node)]

        order = walk(starts, successors, lambda node, log=log: log.append(("cycle", id(node))))
        plain = walk(starts, lambda node: edges[id(node)])
        logs.append(([id(n) for n in order], log, [id(n) for n in plain]))
    assert logs[0] == logs[1]

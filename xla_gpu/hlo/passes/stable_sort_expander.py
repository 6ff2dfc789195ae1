"""StableSortExpander: XLA's pass of that name, for the sorts that need it
here. A stable sort that runs as one kernel keeps its tie-break index in
shared memory (no buffer); one that runs as several kernels (see
`analysis.sort.plan_sort`) needs the index carried in memory between them:
an s32 iota along the sort dimension becomes an extra operand (or an iota
operand it has is used), the comparator breaks ties by it, and the sort is
no longer marked stable (its order is total).
"""

from __future__ import annotations

from ...analysis.sort import INDEX_TYPE, comparator_of, needs_index_operand
from ..module import HloComputation, HloInstruction, HloModule
from ..shape import Shape
from .pipeline import HloPass

__all__ = ["StableSortExpander", "expand_stable_sorts", "stable_comparator"]


class StableSortExpander(HloPass):
    name = "stable-sort-expander"

    def run(self, module: HloModule) -> bool:
        return expand_stable_sorts(module) > 0


def _existing_index_operand(inst: HloInstruction) -> int | None:
    """An operand that is an s32 iota along the sort dimension (XLA reuses
    it as the tie-break)."""
    dim = int(inst.attrs["dimensions"][0])
    for k, op in enumerate(inst.operands):
        iota = op
        if op.opcode == "fusion" and not op.operands:   # XLA's "wrapped_iota"
            called = op.attrs.get("calls")
            iota = called.root if isinstance(called, HloComputation) else op
        if iota.opcode == "iota" and op.shape.element_type == INDEX_TYPE and \
                iota.attrs.get("iota_dimension") == dim and \
                tuple(iota.shape.dims) == tuple(op.shape.dims):
            return k
    return None


def stable_comparator(comp: HloComputation, index_operand: int, name: str) -> HloComputation:
    """XLA's StableSortExpander comparator: comp(a, b) unless comp(a, b)
    equals comp(b, a) (equivalent elements), then index_a < index_b."""
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.instructions:
        copy = inst.clone_with([mapping[id(o)] for o in inst.operands])
        copy.attrs.pop("control-predecessors", None)
        mapping[id(inst)] = copy
        body.append(copy)
    params = {p.parameter_number: mapping[id(p)] for p in comp.parameters}
    forward_root = mapping[id(comp.root)]
    swapped: dict[int, HloInstruction] = {}
    for p in comp.parameters:
        swapped[id(p)] = params[p.parameter_number ^ 1]
    for inst in comp.instructions:
        if inst.opcode == "parameter":
            continue
        if not inst.operands:
            swapped[id(inst)] = mapping[id(inst)]
            continue
        copy = inst.clone_with([swapped[id(o)] for o in inst.operands],
                               name=f"{inst.name}.reversed")
        copy.attrs.pop("control-predecessors", None)
        swapped[id(inst)] = copy
        body.append(copy)
    backward_root = swapped[id(comp.root)]
    pred = Shape("pred", ())
    same = HloInstruction("same_order", "compare", pred, [forward_root, backward_root],
                          {"direction": "EQ"})
    lhs, rhs = params[2 * index_operand], params[2 * index_operand + 1]
    tie = HloInstruction("index_order", "compare", pred, [lhs, rhs], {"direction": "LT"})
    root = HloInstruction("stable_order", "select", pred, [same, tie, forward_root], {})
    body += [same, tie, root]
    return HloComputation(name, body, root, False, comp.location).link_instructions()


def expand_stable_sorts(module: HloModule) -> int:
    """XLA's StableSortExpander for the sorts that need it here (stable
    sorts of several kernels): an s32 iota along the sort dimension becomes
    an extra operand (or an existing one is used) and the comparator breaks
    ties with it; the sort is then no longer marked stable (its order is
    total). Mutates `module`; returns the number of sorts rewritten."""
    count = 0
    for comp in list(module.computations):
        for inst in list(comp.instructions):
            if not needs_index_operand(inst):
                continue
            comparator = comparator_of(inst)
            index = _existing_index_operand(inst)
            if index is None:
                dim = int(inst.attrs["dimensions"][0])
                first = inst.operands[0].shape
                iota_shape = Shape(INDEX_TYPE, tuple(first.dims), first.layout)
                iota = comp.add(
                    "iota", iota_shape, [], name=f"{inst.name}.index", iota_dimension=dim)
                operands = list(inst.operands) + [iota]
                leaves = [o.shape for o in inst.operands] + [iota_shape]
                new_shape = Shape(tuple_shapes=tuple(leaves))
                index = len(operands) - 1
                extended = _with_index_parameters(comparator, len(inst.operands),
                                                  f"{comparator.name}.indexed")
            else:
                operands = list(inst.operands)
                new_shape = inst.shape if inst.shape.is_tuple else \
                    Shape(tuple_shapes=(inst.shape,))
                extended = comparator
            stable = stable_comparator(extended, index, f"{comparator.name}.stable")
            module.add_computation(stable, before=comp)
            attrs = dict(inst.attrs)
            attrs["to_apply"] = stable
            attrs["is_stable"] = False
            attrs.pop("control-predecessors", None)
            new_sort = comp.add_instruction(
                HloInstruction(inst.name + ".stable", "sort", new_shape, operands, attrs,
                               None, None, inst.location))
            if inst.shape.is_tuple:
                parts = [comp.add("get-tuple-element", s, [new_sort],
                                  name=f"{inst.name}.{k}", index=k)
                         for k, s in enumerate(inst.shape.tuple_shapes)]
                replacement = comp.add("tuple", inst.shape, parts, name=inst.name + ".result")
            else:
                replacement = comp.add("get-tuple-element", inst.shape, [new_sort],
                                       name=inst.name + ".result", index=0)
            inst.replace_with(replacement)
            count += 1
    return count


def _with_index_parameters(comp: HloComputation, operands: int, name: str) -> HloComputation:
    """`comp` taking two more (unused) s32 parameters: the index pair of an
    added iota operand."""
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.instructions:
        copy = inst.clone_with([mapping[id(o)] for o in inst.operands])
        mapping[id(inst)] = copy
        body.append(copy)
    scalar = Shape(INDEX_TYPE, ())
    for side in range(2):
        body.append(HloInstruction(f"index.{'lhs' if side == 0 else 'rhs'}", "parameter",
                                   scalar, [], {}, None, 2 * operands + side))
    new = HloComputation(name, body, mapping[id(comp.root)], False, comp.location)
    return new.link_instructions()

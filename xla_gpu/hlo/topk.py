"""XLA's "TopK" custom call: the comparator over (value, index) pairs.

XLA:CPU writes the TopK custom call with the comparator of the sort it
replaced: over (value, index) pairs, 4 parameters, or over the values alone,
2 parameters (a sort of the values only whose result XLA slices: the
indices it returns are then the positions the values came from). Both mean
the same top-k: order by the comparator, ties (neither value first) by the
lower index, as XLA's runtime does. `value_index_comparator` gives the
4-parameter form of either, so that the sort and top-k code sees one kind.
"""

from __future__ import annotations

import weakref

from .module import HloComputation, HloInstruction
from .shape import Shape

__all__ = ["value_index_comparator", "INDEX_TYPE"]

INDEX_TYPE = "s32"

_widened: "weakref.WeakKeyDictionary[HloComputation, HloComputation]" = \
    weakref.WeakKeyDictionary()


def value_index_comparator(comp: HloComputation,
                           index_type: str = INDEX_TYPE) -> HloComputation:
    """`comp` itself when it takes 4 parameters (or any number but 2); for
    a 2-parameter comparator over values, a copy that also takes the two
    indices (parameters 2 and 3, unused). The copy is detached (no module)
    and the same one is returned for the same `comp`."""
    params = comp.parameters
    if len(params) != 2:
        return comp
    cached = _widened.get(comp)
    if cached is not None:
        return cached
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.post_order():
        copy = inst.clone_with([mapping[id(o)] for o in inst.operands])
        mapping[id(inst)] = copy
        body.append(copy)
    taken = {i.name for i in body}
    for number, base in ((2, "lhs_index"), (3, "rhs_index")):
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}.{k}"
        taken.add(name)
        body.append(HloInstruction(name, "parameter", Shape(index_type, ()), [], {},
                                   None, number, comp.location))
    widened = HloComputation(f"{comp.name}.with_indices", body, mapping[id(comp.root)],
                             False, comp.location)
    widened.link_instructions()
    _widened[comp] = widened
    return widened

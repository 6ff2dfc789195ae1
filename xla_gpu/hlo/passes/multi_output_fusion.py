"""MultiOutputFusion, as XLA:GPU runs it after PriorityFusion:

* sibling fusion: fusions that read the same (non-trivial) operand are
  merged into one multi-output fusion, which reads it once — the two
  moments of a layer norm become one reduction kernel;
* producer-consumer fusion: a producer that PriorityFusion could not fuse
  (it has other users) is fused into a consumer fusion and kept as an extra
  output for the others — softmax's exp is computed by the kernel that sums
  it and written for the division.

A merge never creates a cycle (neither fusion may reach the other except
through the producer-consumer edge itself; checked on a reachability map)
and only happens where the emitters accept the merged body: a reduction
fusion takes side outputs shaped like its input and other reductions of the
same shape, a loop fusion outputs of one shape (XLA's
ShapesCompatibleForMultiOutputFusion).
"""

from __future__ import annotations

from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction
from .fusion_utils import (body_acceptable, build_merged_body, create_fusion,
                           fusion_kind_for, fusion_roots, is_fusible, merge_fusions,
                           release_trial)
from .priority_fusion import FusionPass
from .util import byte_size, is_effective_scalar

__all__ = ["MultiOutputFusion", "ReachabilityMap"]


class ReachabilityMap:
    """For each instruction of a computation's order, the set of
    instructions it depends on (itself included; operands and control
    predecessors), as bitsets over the positions in that order.

    A row depends only on the instructions before it, so after a rewrite
    that left the first `unchanged` instructions of the order as they were
    (`reorder`), only the rows after them are built again, and only when a
    question needs them."""

    def __init__(self, order: list[HloInstruction]):
        self._order = order
        self._position: dict[int, int] = {}
        self._ancestors: list[int] = []

    def reorder(self, order: list[HloInstruction], unchanged: int) -> None:
        """The computation's new order, whose first `unchanged`
        instructions (and what they depend on) are as before."""
        self._order = order
        del self._ancestors[unchanged:]

    def _build(self) -> None:
        order, position, ancestors = self._order, self._position, self._ancestors
        by_name: dict[str, HloInstruction] | None = None
        for k in range(len(ancestors), len(order)):
            inst = order[k]
            position[id(inst)] = k
            bits = 1 << k
            for o in inst.operands:
                bits |= ancestors[position[id(o)]]
            preds = inst.attrs.get(CONTROL_PREDECESSORS)
            if preds:
                if by_name is None:
                    by_name = {i.name: i for i in order}
                for name in preds:
                    pred = by_name.get(name)
                    if pred is not None:
                        bits |= ancestors[position[id(pred)]]
            ancestors.append(bits)

    def depends(self, a: HloInstruction, b: HloInstruction) -> bool:
        """Whether `a` (transitively) reads `b`."""
        if len(self._ancestors) < len(self._order):
            self._build()
        position = self._position
        return bool(self._ancestors[position[id(a)]] >> position[id(b)] & 1)


_NOT_CANDIDATES = frozenset({"parameter", "constant", "tuple", "get-tuple-element",
                             "bitcast"})


def _is_mergeable_fusion(inst: HloInstruction) -> bool:
    """A kLoop/kInput fusion, or a lone fusible instruction (wrapped into
    a fusion when merged), whose outputs are read through
    get-tuple-element when there are several."""
    if inst.opcode != "fusion":
        return inst.opcode not in _NOT_CANDIDATES and is_fusible(inst) and \
            not inst.shape.is_tuple and inst.opcode != "dynamic-update-slice"
    if str(inst.attrs.get("kind", "kLoop")) not in ("kLoop", "kInput"):
        return False
    body = inst.attrs["calls"]
    if inst.shape.is_tuple and body.root.opcode != "tuple":
        return False  # a variadic reduce root: nested tuples
    if inst.shape.is_tuple and any(u.opcode != "get-tuple-element" for u in inst.users):
        return False
    return True


def _trial(first: HloInstruction, second: HloInstruction) -> HloComputation:
    """The merged body (detached), outputs as `merge_fusions` orders them."""
    body = HloComputation("trial")
    params: dict[int, HloInstruction] = {}

    def value_of(o):
        if id(o) not in params:
            if o.opcode == "constant" and is_effective_scalar(o.shape):
                params[id(o)] = body.add_instruction(o.clone_with([]), keep_name=True)
            else:
                p = HloInstruction.create_parameter(len(params), o.shape, f"p{len(params)}")
                params[id(o)] = body.add_instruction(p, keep_name=True)
        return params[id(o)]

    build_merged_body(body, first, second, value_of)
    return body


def _merge_acceptable(first: HloInstruction, second: HloInstruction) -> bool:
    """`_shapes_compatible` of the trial merged body (released after)."""
    body = _trial(first, second)
    ok = _shapes_compatible(body)
    release_trial(body)
    return ok


def _shapes_compatible(body: HloComputation) -> bool:
    """The emitter takes the merged body (`body_acceptable`) and its roots
    share one loop shape (XLA's ShapesCompatibleForMultiOutputFusion): the
    outputs of a loop-like fusion one shape; a reduction fusion's reduces
    one input shape and reduced dimensions, its side outputs that shape."""
    info = body_acceptable(body)
    if not info.ok:
        return False
    roots = fusion_roots(body)
    if info.kind in ("loop", "concatenate", "input_slices", "in_place_dynamic_update_slice"):
        dims = {tuple(r.shape.dims) for r in roots}
        return len(dims) == 1
    if info.kind == "reduction":
        reduces = [h for h in dict.fromkeys(info.heroes) if h.opcode == "reduce"]
        dims = reduces[0].operands[0].shape.dims
        reduced = sorted(reduces[0].attrs["dimensions"])
        if any(h.operands[0].shape.dims != dims or sorted(h.attrs["dimensions"]) != reduced
               for h in reduces[1:]):
            return False
        return all(h.opcode == "reduce" or r.shape.dims == dims
                   for r, h in zip(roots, info.heroes))
    return True


class MultiOutputFusion(FusionPass):
    name = "multi-output-fusion"

    def run_on(self, comp: HloComputation) -> bool:
        # Pairs found unmergeable stay so: merges only add paths and leave
        # other fusions' bodies alone. The objects are kept alive so that
        # their ids are not reused.
        self._refused: dict[tuple[int, int], tuple] = {}
        # The order the last round scanned (kept alive with it, so that
        # identity tells its instructions apart from later ones) and the
        # reachability of its instructions.
        self._scanned: list[HloInstruction] = []
        self._reach = ReachabilityMap([])
        # Per shared operand, its users (in order) when a round last found
        # every pair of the mergeable ones refused: the same users again
        # mean the same pairs, all still refused.
        self._siblings_refused: dict[int, tuple[HloInstruction, list[HloInstruction]]] = {}
        self._trivial: dict[int, tuple[HloInstruction, bool]] = {}
        changed = False
        while self._one_merge(comp):
            changed = True
        return changed

    def _fits(self, a: HloInstruction, b: HloInstruction) -> bool:
        size = sum(len(x.attrs["calls"]) if x.opcode == "fusion" else 1 for x in (a, b))
        operands = len({id(o) for o in (*a.operands, *b.operands)})
        outputs = len(a.shape.leaves()) + len(b.shape.leaves())
        return size <= self.max_fusion_instructions and \
            operands + outputs <= self.max_operands

    def _merge(self, first: HloInstruction, second: HloInstruction) -> None:
        comp = first.parent
        # The round sorted the computation and nothing changed since: the
        # merge rewrites the two, what reads them (after them) and removes
        # them, and appends the rest, so the instructions before both stay
        # in order for the next round's sort.
        insts = comp._instructions
        ordered = not comp._unordered
        unchanged = min(insts.index(first), insts.index(second)) if ordered else 0
        # (the list keeps those instructions alive: no new one takes an id)
        alive = list(insts) if ordered else None
        before = set(map(id, alive)) if ordered else None
        if first.opcode != "fusion":
            first = create_fusion(first)
        if second.opcode != "fusion":
            second = create_fusion(second)
        fusion = merge_fusions(first, second)
        fusion.attrs["kind"] = fusion_kind_for(body_acceptable(fusion.attrs["calls"]))
        if before is not None:
            unchanged = max(unchanged, _first_reader_of_new(comp, before))
        del alive
        comp._keep_order_before(unchanged)

    def _one_merge(self, comp: HloComputation) -> bool:
        """Finds and performs one merge (producer-consumer first, then
        siblings); False when none is left."""
        insts = comp.instructions
        # A merge rewrites its two fusions, their users and the users'
        # control successors, all after the earlier of the two in the
        # order, and gives the operands of the two a new user in place of
        # them. The instructions before the first place where the order
        # changed are thus as the last round saw them, as is everything
        # their candidate pairs depend on: what they read, how many users
        # their producers have besides them, and the reachability among
        # them. The last round found none of those consumers mergeable
        # (it stopped at a later one, or at none), so neither does this
        # one.
        unchanged = _common_prefix(self._scanned, insts)
        self._scanned = list(insts)   # the computation mutates its own list
        reach = self._reach
        reach.reorder(insts, unchanged)
        classified: dict[int, bool] = {}

        def mergeable(inst: HloInstruction) -> bool:
            # Nothing changes until the merge that ends the round.
            flag = classified.get(id(inst))
            if flag is None:
                flag = classified[id(inst)] = _is_mergeable_fusion(inst)
            return flag

        # Producer-consumer: a fusion with other users fused into a
        # consumer fusion as an extra output.
        for consumer in insts[unchanged:]:
            if not mergeable(consumer):
                continue
            for producer in dict.fromkeys(consumer.operands):
                if not mergeable(producer) or producer.shape.is_tuple:
                    continue
                # Most pairs a round meets were refused in an earlier one:
                # asked first.
                key = (id(producer), id(consumer))
                if key in self._refused:
                    continue
                if not any(u is not consumer for u in producer.users):
                    continue   # no other user: PriorityFusion's case
                if any(reach.depends(o, producer) for o in consumer.operands
                       if o is not producer) or not self._fits(producer, consumer) or \
                        not _merge_acceptable(producer, consumer):
                    self._refused[key] = (producer, consumer)
                    continue
                self._merge(producer, consumer)
                return True
        # Siblings: fusions reading the same non-trivial operand.
        trivial = self._trivial
        for shared in insts:
            # Whether an operand is trivial (its shape and opcode) does not
            # change while it exists: asked once per instruction, not once
            # per round.
            known = trivial.get(id(shared))
            if known is None or known[0] is not shared:
                known = trivial[id(shared)] = (shared, _trivial_operand(shared))
            if known[1]:
                continue
            readers = shared.users
            seen = self._siblings_refused.get(id(shared))
            # (list equality: the same instructions, compared by identity)
            if seen is not None and seen[0] is shared and seen[1] == readers:
                continue
            users = [u for u in dict.fromkeys(readers) if mergeable(u)]
            for i, a in enumerate(users):
                for b in users[i + 1:]:
                    key = (id(a), id(b))
                    if key in self._refused:
                        continue
                    if reach.depends(a, b) or reach.depends(b, a) or \
                            not self._fits(a, b) or not _merge_acceptable(a, b):
                        self._refused[key] = (a, b)
                        continue
                    self._merge(a, b)
                    return True
            # Whether an array-shaped instruction is mergeable does not
            # change while it exists (a tuple-shaped fusion's depends on its
            # readers), so these readers give the same, refused, pairs.
            if not any(u.shape.is_tuple for u in readers):
                self._siblings_refused[id(shared)] = (shared, list(readers))
        return False


def _first_reader_of_new(comp: HloComputation, before: set[int]) -> int:
    """After a merge in a computation that was in order (`before`: the ids
    of its instructions then): how many leading instructions are still in
    order and read nothing after them. The merge appended its new
    instructions (the fusion, its get-tuple-elements) and rewired the
    readers of the two fusions to them; everything before the first of
    those readers still reads only what precedes it. 0 when the list is
    not that (new instructions elsewhere than at the end, control edges)."""
    if comp.has_control_edges():
        return 0
    insts = comp._instructions
    new = set(map(id, insts)) - before
    k = len(insts)
    while k > 0 and id(insts[k - 1]) in new:
        k -= 1
    if len(insts) - k != len(new):
        return 0
    first = k
    for inst in insts[k:]:
        for user in inst.users:
            if id(user) not in new:
                first = min(first, insts.index(user))
    return first


def _trivial_operand(shared: HloInstruction) -> bool:
    """An operand whose readers are not merged as siblings: a scalar, a
    tuple, a constant, or under 64 bytes."""
    return is_effective_scalar(shared.shape) or shared.shape.is_tuple or \
        shared.opcode == "constant" or byte_size(shared.shape) < 64


def _common_prefix(before: list[HloInstruction], after: list[HloInstruction]) -> int:
    """How many leading instructions two orders share."""
    n = min(len(before), len(after))
    k = 0
    while k < n and before[k] is after[k]:
        k += 1
    return k

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

The pass merges one pair per round; most of what a round would ask was
answered in an earlier one. Refused pairs stay refused; the scans look
again only at the instructions a merge touched (`_merge` says which); most
refusals are told from the two instructions' outputs and heroes, without
a trial body (`_surely_refused`); an accepted trial body becomes the merged
fusion's body (`merge_fusions(..., trial=...)`); and the order after a
merge is made where it changed (`_sorted_after_merge`).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import compress, count
from math import inf
from operator import is_not

from ...analysis.fusion import CARRYING_OPCODES, HERO_OPCODES, find_hero, is_trivial_operand
from ...analysis.transpose import is_tiled_transpose
from ..fusions import ELEMENTWISE_OPCODES
from ..graph import post_order
from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction
from .fusion_utils import (BodyInfo, TrialMerge, body_acceptable, create_fusion,
                           fusion_kind_for, fusion_roots, is_fusible, merge_fusions,
                           merged_first_outputs, release_trial, trial_merge)
from .priority_fusion import FusionPass
from .util import byte_size, is_effective_scalar

__all__ = ["MultiOutputFusion", "ReachabilityMap"]


# How many rows past those built `ReachabilityMap.depends` builds to answer
# a question; further than that, it walks the graph instead.
_ROWS_BUILT_AHEAD = 64


class ReachabilityMap:
    """For each instruction of a computation's order, the set of
    instructions it depends on (itself included; operands and control
    predecessors), as bitsets over the positions in that order.

    A row depends only on the instructions before it, so after a rewrite
    that left the first `unchanged` instructions of the order as they were
    (`reorder`), only the rows after them are built again, and only as far
    as a question needs them (the row of the later of the two asked
    about): most questions are about pairs near the head of what changed.
    A question about an instruction far past the rows built is answered by
    a walk of the graph instead (`_search`)."""

    def __init__(self, order: list[HloInstruction]):
        self._order: list[HloInstruction] = []
        self._position: dict[int, int] = {}
        self._ancestors: list[int] = []
        self._by_name: dict[str, HloInstruction] | None = None
        self.reorder(order, 0)

    def reorder(self, order: list[HloInstruction], unchanged: int) -> None:
        """The computation's new order, whose first `unchanged`
        instructions (and what they depend on) are as before."""
        self._order = order
        del self._ancestors[unchanged:]
        self._by_name = None
        # Every position from the first change on (the ones before are
        # those of the same instructions): questions name any instruction.
        self._position.update(zip(map(id, order[unchanged:]), range(unchanged, len(order))))

    def position(self, inst: HloInstruction) -> int:
        """Where `inst` is in the current order."""
        return self._position[id(inst)]

    def _build(self, last: int) -> None:
        order, position, ancestors = self._order, self._position, self._ancestors
        for k in range(len(ancestors), last + 1):
            inst = order[k]
            bits = 1 << k
            for o in inst.operands:
                bits |= ancestors[position[id(o)]]
            preds = inst.attrs.get(CONTROL_PREDECESSORS)
            if preds:
                if self._by_name is None:
                    self._by_name = {i.name: i for i in order}
                for name in preds:
                    pred = self._by_name.get(name)
                    if pred is not None:
                        bits |= ancestors[position[id(pred)]]
            ancestors.append(bits)

    def depends(self, a: HloInstruction, b: HloInstruction) -> bool:
        """Whether `a` (transitively) reads `b`."""
        position = self._position
        pa, pb = position[id(a)], position[id(b)]
        if pb > pa:
            return False   # the order puts what a reads before a
        ancestors = self._ancestors
        if len(ancestors) <= pa:
            if pa - len(ancestors) > _ROWS_BUILT_AHEAD:
                return pa == pb or self._search(a, pb)
            self._build(pa)
        return bool(ancestors[pa] >> pb & 1)

    def _search(self, a: HloInstruction, pb: int) -> bool:
        """`depends(a, b)` (`b` at position `pb`) for an `a` far past the
        rows built, by a walk up from `a` over what it reads, through the
        instructions after `b` that have no row yet (those with a row
        answer from it). Rows built that far would mostly be dropped
        again at the next merge before they are read, and the instructions
        such a question is asked about (two readers of one value, far
        apart: a forward and a backward op) almost always depend, which
        the walk, taking the earliest operand first, finds in a few steps."""
        order, position, ancestors = self._order, self._position, self._ancestors
        built = len(ancestors)
        seen = {id(a)}
        stack = [a]
        while stack:
            inst = stack.pop()
            reads = list(inst.operands)
            preds = inst.attrs.get(CONTROL_PREDECESSORS)
            if preds:
                if self._by_name is None:
                    self._by_name = {i.name: i for i in order}
                reads += [p for p in map(self._by_name.get, preds) if p is not None]
            ahead = []
            for o in reads:
                if id(o) in seen:
                    continue
                seen.add(id(o))
                at = position[id(o)]
                if at < pb:
                    continue
                if at == pb or (at < built and ancestors[at] >> pb & 1):
                    return True
                if at >= built:
                    ahead.append((at, o))
            # (the earliest popped first: the walk heads for `b`; positions
            # are distinct, so the pairs sort by position alone)
            ahead.sort(reverse=True)
            stack.extend(o for _, o in ahead)
        return False


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


# The emitters whose bodies may have outputs of several shapes (the
# reduction emitter's reductions and side outputs), or that only an op of
# these can call for (`choose_emitter`: a scatter or reduce hero, a tiled
# transpose, a dot's epilogue, a sort, top-k or convolution root). A body
# with none of them gets a loop-like emitter (loop, concatenate, input
# slices, in-place dynamic-update-slice), or none.
_EMITTER_OPCODES = frozenset({"reduce", "scatter", "transpose", "dot", "sort", "topk",
                              "convolution", "custom-call"})
_LOOP_LIKE = ("loop", "concatenate", "input_slices", "in_place_dynamic_update_slice")


class _Side:
    """What the verdict on a merge reads of one of the two instructions
    that the instruction alone says (kept while it exists): its outputs
    (as `build_merged_body` numbers them) and their heroes, the opcodes in
    it, whether its body has dead code (which the merged body drops, so
    that what remains has fewer users), and per output the parameters
    that `find_hero`'s walk from it looks at (`_hero_walk`)."""

    __slots__ = ("inst", "roots", "heroes", "opcodes", "clean", "looked")

    def __init__(self, inst: HloInstruction):
        self.inst = inst
        if inst.opcode != "fusion":
            # Its clone is its own hero: `find_hero` stops at once there, or
            # at the next operand, a parameter or a cloned constant (having
            # looked at all of them).
            self.roots, self.heroes = [inst], [inst]
            self.looked = [frozenset(range(len(inst.operands)))]
            self.opcodes = frozenset((inst.opcode,))
            self.clean = True
            return
        body = inst.attrs["calls"]
        root = body.root
        self.roots = fusion_roots(body)
        self.heroes, self.looked = [], []
        for r in self.roots:
            hero, looked = _hero_walk(r)
            if hero is not find_hero(r):
                hero = None   # (not the walk `_hero_walk` follows: not known)
            self.heroes.append(hero)
            self.looked.append(looked)
        opcodes = set()
        clean = True
        for i in body._instructions:
            opcodes.add(i.opcode)
            # Each instruction but the root and the parameters read: all
            # lead to the root (the body has no cycle).
            if not i.users and i is not root and i.opcode != "parameter":
                clean = False
        self.opcodes = frozenset(opcodes)
        self.clean = clean


def _hero_walk(root: HloInstruction) -> tuple[HloInstruction, frozenset[int]]:
    """`find_hero(root)`'s walk, and the numbers of the parameters it
    looks at on the way: as an operand of an op it passes (its opcode,
    whether it is trivial, how many users it has) or below such an
    operand's broadcasts (whether that is trivial). In a body where those
    parameters (and what the ops passed read otherwise) are the same, the
    walk ends at the same hero."""
    looked: set[int] = set()

    def look(o: HloInstruction) -> None:
        while o.opcode == "broadcast":
            o = o.operands[0]
        if o.opcode == "parameter":
            looked.add(o.parameter_number)

    if root.opcode == "get-tuple-element":
        look(root.operands[0])
        if root.operands[0].opcode == "reduce":
            return root.operands[0], frozenset(looked)
    cur = root
    while cur.opcode not in HERO_OPCODES:
        if cur.opcode not in CARRYING_OPCODES and cur.opcode not in ELEMENTWISE_OPCODES:
            return root, frozenset(looked)
        for o in cur.operands:
            look(o)
        live = list(dict.fromkeys(o for o in cur.operands if not is_trivial_operand(o)))
        if len(live) != 1 or live[0].opcode == "parameter" or \
                not (len(live[0].users) == 1 or live[0].opcode in HERO_OPCODES):
            return root, frozenset(looked)
        cur = live[0]
    return cur, frozenset(looked)


def _surely_refused(first_side: _Side, second_side: _Side) -> bool:
    """Whether the merged body of `first` and `second` (their `_Side`s)
    is sure to be refused by `_shapes_compatible`, told without building
    it. True only where the rule is certain; False means: build the trial.

    The merged body's outputs are known (`merged_first_outputs`), and so
    are the heroes of most of them: an output's hero in the merged body is
    its hero in its own body wherever `find_hero`'s walk sees the same
    there, i.e. the same operands and users along the way. Cloning keeps
    both, except where the merge changes them: the body's dead code is
    dropped, first's outputs lose its root tuple as a user (they keep one
    where the merged body outputs them or second reads them), and second's
    parameters that read first become first's outputs. From the heroes
    (and the opcodes when some hero is not known), the emitter:

    * a scatter hero among several outputs: the scatter emitter, which
      takes one output only;
    * a reduce hero: the reduction emitter (or, where a hero not known is
      a scatter, the scatter emitter again), whose reductions must reduce
      one shape the same way and whose other outputs must have that shape;
    * neither, and no op that calls for another emitter: a loop-like one,
      whose outputs must all have one shape."""
    first, second = first_side.inst, second_side.inst
    for side in (first, second):
        # A fusion's scalar constant operand is cloned into the merged body
        # as a constant, no longer a parameter: trivial to the walks. (A
        # lone instruction is its own hero whatever its operands.)
        if side.opcode == "fusion" and \
                any(o.opcode == "constant" and is_effective_scalar(o.shape) for o in side.operands):
            return False
    if any(r.shape.is_tuple for r in (*first_side.roots, *second_side.roots)):
        return False
    first_multi = len(first_side.roots) > 1 or first.shape.is_tuple
    kept = merged_first_outputs(first, second, first_multi)
    read = set(kept)   # first's outputs with a reader in the merged body
    mapped: set[int] = set()   # second's operands that are first's outputs
    first_known = first_side.clean
    for k, o in enumerate(second.operands):
        if o is first:
            mapped.add(k)
            read.add(0)
            first_known = first_known and not first_multi
        elif o.opcode == "get-tuple-element" and o.operands[0] is first:
            mapped.add(k)
            read.add(o.attrs["index"])
    if first_multi and len(read) != len(first_side.roots):
        first_known = False
    roots = [first_side.roots[k] for k in kept] + second_side.roots
    heroes: list[HloInstruction | None] = \
        [first_side.heroes[k] if first_known else None for k in kept]
    for hero, looked in zip(second_side.heroes, second_side.looked):
        if not second_side.clean or looked & mapped:
            hero = None
        heroes.append(hero)
    known = [h for h in heroes if h is not None]
    several = len(roots) > 1
    if several and any(h.opcode == "scatter" for h in known):
        return True
    first_reduce = next((k for k, h in enumerate(heroes)
                         if h is not None and h.opcode == "reduce"), None)
    if first_reduce is not None:
        if any(h is None for h in heroes[:first_reduce]):
            return False   # the first reduction, whose shape the rest follow, unknown
        reduce = heroes[first_reduce]
        dims = reduce.operands[0].shape.dims
        reduced = sorted(reduce.attrs["dimensions"])
        for r, h in zip(roots, heroes):
            if h is None:
                continue
            if h.opcode == "reduce":
                if h.operands[0].shape.dims != dims or sorted(h.attrs["dimensions"]) != reduced:
                    return True
            elif r.shape.dims != dims:
                return True
        return False
    opcodes = first_side.opcodes | second_side.opcodes
    if len(known) < len(heroes) or not several:
        if opcodes & _EMITTER_OPCODES:
            return False
    elif "dot" in opcodes or any(h.opcode == "transpose" and is_tiled_transpose(h)
                                 for h in known):
        return False
    return len({tuple(r.shape.dims) for r in roots}) > 1


def _trial(first: HloInstruction, second: HloInstruction) -> HloComputation:
    """The merged body (detached), outputs as `merge_fusions` orders them."""
    return trial_merge(first, second).body


def _merge_acceptable(first: HloInstruction, second: HloInstruction) -> bool:
    """`_shapes_compatible` of the trial merged body (released after)."""
    body = _trial(first, second)
    ok = _shapes_compatible(body)
    release_trial(body)
    return ok


def _shapes_compatible(body: HloComputation, info: BodyInfo | None = None) -> bool:
    """The emitter takes the merged body (`body_acceptable`, or `info`
    when that is known) and its roots share one loop shape (XLA's
    ShapesCompatibleForMultiOutputFusion): the outputs of a loop-like
    fusion one shape; a reduction fusion's reduces one input shape and
    reduced dimensions, its side outputs that shape."""
    if info is None:
        info = body_acceptable(body)
    if not info.ok:
        return False
    roots = fusion_roots(body)
    if info.kind in _LOOP_LIKE:
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
        # Per operand: None when it is trivial (`_trivial_operand`), else
        # its users (in order) when a round last found every pair of the
        # mergeable ones refused, the users of the tuple-shaped ones among
        # them then, and the ids of the mergeable ones.
        self._siblings: dict[int, tuple] = {}
        # `_is_mergeable_fusion` per instruction (see `_is_mergeable`).
        self._mergeable: dict[int, tuple] = {}
        # Per consumer a round found no producer to merge with: its
        # operands and users then, and the producers it was not tried with
        # only because they had no other user, with their users then.
        self._consumer_settled: dict[int, tuple] = {}
        self._sides: dict[int, _Side] = {}
        # The instructions the producer-consumer scan (as consumers) and
        # the sibling scan (as shared operands) must look at again: those
        # never looked at, not settled, or changed by a merge since (see
        # `_merge`); the others' settled answers hold.
        self._consumers_pending: set[int] = set(map(id, comp.instructions))
        self._shared_pending: set[int] = set(self._consumers_pending)
        # The trial body (and its BodyInfo) of the pair last accepted.
        self._accepted: tuple[TrialMerge, BodyInfo] | None = None
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

    def _side(self, inst: HloInstruction) -> _Side:
        side = self._sides.get(id(inst))
        if side is None or side.inst is not inst:
            side = self._sides[id(inst)] = _Side(inst)
        return side

    def _refused_by_sides(self, first: HloInstruction, second: HloInstruction) -> bool:
        """`_surely_refused` of the pair: most pairs the pass asks about
        are refused here, before the questions that cost more (whether
        either reaches the other, the trial body)."""
        return _surely_refused(self._side(first), self._side(second))

    def _acceptable(self, first: HloInstruction, second: HloInstruction) -> bool:
        """`_merge_acceptable` of a pair `_refused_by_sides` did not
        refuse. An accepted trial of two fusions is kept for `_merge` to
        adopt (`merge_fusions` builds the same body again otherwise)."""
        trial = trial_merge(first, second)
        info = body_acceptable(trial.body)
        ok = _shapes_compatible(trial.body, info)
        if ok and first.opcode == "fusion" and second.opcode == "fusion":
            self._accepted = (trial, info)
        else:
            trial.release()
        return ok

    def _merge(self, first: HloInstruction, second: HloInstruction) -> None:
        comp = first.parent
        # The round sorted the computation and nothing changed since: the
        # merge rewrites the two, what reads them (after them) and removes
        # them, and appends the rest, so the instructions before both stay
        # in order for the next round's sort.
        insts = comp._instructions
        ordered = not comp._unordered
        alive = before = reader = None
        # The merge removes the two and their get-tuple-elements, appends
        # the new instructions and rewires the readers of the removed ones
        # to them; the operands of the two get the new fusion as a user in
        # their place. Nothing else changes.
        gtes = [u for x in (first, second) for u in x.users if u.opcode == "get-tuple-element"]
        removed = {id(first), id(second), *map(id, gtes)}
        readers = [u for x in (first, second, *gtes) for u in x.users if id(u) not in removed]
        touched = [*first.operands, *second.operands, *readers]
        if ordered:
            position = self._reach.position
            unchanged = min(position(first), position(second))
            if comp.has_control_edges():
                # (the list keeps those instructions alive: no new one
                # takes an id)
                alive = list(insts)
                before = set(map(id, alive))
            else:
                # The first of the readers (in the order, which the
                # removals keep) is where the order may have changed; its
                # index then is its position less the removed instructions
                # before it.
                if readers:
                    reader = min(readers, key=position)
                    at = position(reader)
                    removed_at = sorted(position(x) for x in (first, second, *gtes))
                    reader_index = at - bisect_left(removed_at, at)
                    kept = len(insts) - len(removed_at)
        else:
            unchanged = 0
        accepted, self._accepted = self._accepted, None
        if accepted is not None and accepted[0].first is first and accepted[0].second is second:
            # The round's trial of this pair, nothing changed since: its
            # body is the merged one.
            trial, info = accepted
            fusion = merge_fusions(first, second, trial=trial)
        else:
            if first.opcode != "fusion":
                first = create_fusion(first)
            if second.opcode != "fusion":
                second = create_fusion(second)
            fusion = merge_fusions(first, second)
            info = body_acceptable(fusion.attrs["calls"])
        fusion.attrs["kind"] = fusion_kind_for(info)
        new = [fusion, *fusion.users]   # its get-tuple-elements, and what reads those
        new += [u for g in fusion.users for u in g.users]
        for pending in (self._consumers_pending, self._shared_pending):
            pending.update(map(id, touched))
            pending.update(map(id, new))
        if before is not None:
            unchanged = max(unchanged, _first_reader_of_new(comp, before))
        elif reader is not None and reader_index < len(comp._instructions) and \
                comp._instructions[reader_index] is reader:
            unchanged = max(unchanged, reader_index)
            # The sort would keep everything but the new instructions and
            # what the readers' walks move (`_sorted_after_merge`): done
            # here, where only those places need looking at.
            order = _sorted_after_merge(comp._instructions, kept, readers, removed_at,
                                        self._reach._position, fusion)
            if order is not None:
                # The same instructions in another order: whether any has
                # control predecessors is what it was (the setter forgets
                # it, and asking again scans the whole computation).
                edges = comp._control_edges
                comp.instructions = order
                comp._control_edges = edges
                unchanged = len(order)
        del alive
        comp._keep_order_before(unchanged)

    def _is_mergeable(self, inst: HloInstruction) -> bool:
        """`_is_mergeable_fusion(inst)`, asked once while its answer holds:
        for as long as `inst` exists, or (a tuple-shaped fusion, whose
        answer reads its users) while its users are the same."""
        known = self._mergeable.get(id(inst))
        if known is not None and known[0] is inst and \
                (known[2] is None or known[2] == inst.users):
            return known[1]
        flag = _is_mergeable_fusion(inst)
        if inst.shape.is_tuple:
            users = list(inst.users) if inst.opcode == "fusion" else None
            self._mergeable[id(inst)] = (inst, flag, users)
        elif _fixed(inst):
            self._mergeable[id(inst)] = (inst, flag, None)
        return flag

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
        mergeable = self._is_mergeable
        refused = self._refused
        settled = self._consumer_settled
        # Producer-consumer: a fusion with other users fused into a
        # consumer fusion as an extra output.
        tail = insts[unchanged:]
        pending = self._consumers_pending
        for consumer in compress(tail, map(pending.__contains__, map(id, tail))):
            known = settled.get(id(consumer))
            if known is not None and known[0] is consumer and known[1] == consumer.operands \
                    and (known[2] is None or known[2] == consumer.users) and \
                    (not known[3] or all(p.users == users for p, users in known[3])):
                pending.discard(id(consumer))
                continue
            lonely = []   # producers whose only user is the consumer
            if mergeable(consumer):
                for producer in dict.fromkeys(consumer.operands):
                    if not mergeable(producer) or producer.shape.is_tuple:
                        continue
                    # Most pairs a round meets were refused in an earlier
                    # one: asked first.
                    key = (id(producer), id(consumer))
                    if key in refused:
                        continue
                    if not any(u is not consumer for u in producer.users):
                        lonely.append((producer, list(producer.users)))
                        continue   # no other user: PriorityFusion's case
                    if not self._fits(producer, consumer) or \
                            self._refused_by_sides(producer, consumer) or \
                            any(reach.depends(o, producer) for o in consumer.operands
                                if o is not producer) or \
                            not self._acceptable(producer, consumer):
                        refused[key] = (producer, consumer)
                        continue
                    self._merge(producer, consumer)
                    return True
            # Nothing to merge with: the same again while what the answer
            # read is the same (its operands; a tuple-shaped one's users,
            # which say whether it is mergeable; the users of its lone
            # producers; the other pairs are refused for good), unless an
            # instruction with control predecessors may become mergeable.
            if _fixed(consumer) and all(_fixed(o) for o in consumer.operands):
                settled[id(consumer)] = (consumer, list(consumer.operands),
                                         list(consumer.users) if consumer.shape.is_tuple
                                         else None, lonely)
                pending.discard(id(consumer))
        # Siblings: fusions reading the same non-trivial operand.
        siblings = self._siblings
        pending = self._shared_pending
        for shared in compress(insts, map(pending.__contains__, map(id, insts))):
            known = siblings.get(id(shared))
            if known is not None and known[0] is shared:
                # (trivial: its shape and opcode stay; else list equality:
                # the same instructions, compared by identity)
                if known[1] is None or known[1] == shared.users and \
                        (not known[2] or all(u.users == users for u, users in known[2])):
                    pending.discard(id(shared))
                    continue
            elif _trivial_operand(shared):
                siblings[id(shared)] = (shared, None, (), ())
                pending.discard(id(shared))
                continue
            readers = shared.users
            users = [u for u in dict.fromkeys(readers) if mergeable(u)]
            # The pairs of the mergeable readers of the last time all were
            # refused are refused still (in the same order: users lists
            # only lose and append users): only pairs with another one
            # are asked about.
            before = known[3] if known is not None and known[0] is shared and \
                known[1] is not None else ()
            for i, a in enumerate(users):
                later = users[i + 1:]
                if id(a) in before:
                    later = [b for b in later if id(b) not in before]
                for b in later:
                    key = (id(a), id(b))
                    if key in refused:
                        continue
                    if not self._fits(a, b) or self._refused_by_sides(a, b) or \
                            reach.depends(a, b) or reach.depends(b, a) or \
                            not self._acceptable(a, b):
                        refused[key] = (a, b)
                        continue
                    self._merge(a, b)
                    return True
            # Every pair refused: the same readers give the same pairs,
            # all still refused. Whether an array-shaped instruction is
            # mergeable does not change while it exists; a tuple-shaped
            # fusion's reads its users, so those are kept too (and nothing
            # is kept while an instruction with control predecessors among
            # them may become mergeable).
            tuples = [(u, list(u.users)) for u in dict.fromkeys(readers) if u.shape.is_tuple]
            if not tuples or all(_fixed(u) for u in readers):
                siblings[id(shared)] = (shared, list(readers), tuples, set(map(id, users)))
                pending.discard(id(shared))
        return False


def _fixed(inst: HloInstruction) -> bool:
    """Whether `_is_mergeable_fusion(inst)` can only change with the users
    of `inst`: a fusion's reads its kind, body and users; another
    instruction's also whether it has control predecessors, which one
    without any never gets (merges only move existing ones) but one with
    some may lose (when the instruction they name is removed)."""
    return inst.opcode == "fusion" or not inst.attrs.get(CONTROL_PREDECESSORS)


def _sorted_after_merge(insts: list[HloInstruction], kept: int,
                        readers: list[HloInstruction], removed_at: list[int],
                        positions: dict[int, int],
                        fusion: HloInstruction) -> list[HloInstruction] | None:
    """The order the computation's sort (`HloComputation._restore_order`,
    its stable topological sort) gives `insts`, the list a merge left in a
    computation without control edges that was in order: its first `kept`
    instructions the ones from before in their order (`positions` there,
    less the removed ones at `removed_at` before them), then the merge's
    new ones (the fusion first); `readers`, the old instructions that now
    read new ones. The sort keeps an old instruction where it is unless a
    walk moved it (its operands come before it), so it only has to look at
    the readers: each one still waiting for a new operand starts the
    sort's depth-first walk (`post_order`) over what is not placed yet;
    the new instructions left come last, as the sort places them. None
    when the list is not that."""
    if kept >= len(insts) or insts[kept] is not fusion:
        return None
    added = insts[kept:]
    new = set(map(id, added))

    def index(x: HloInstruction) -> int:
        at = positions[id(x)]
        return at - bisect_left(removed_at, at)

    def refuse_cycle(inst: HloInstruction) -> None:
        raise inst.error("cycle in the instruction graph")

    pulled: set[int] = set()    # placed early, by a walk (or the new ones, placed)
    pulled_at: list[int] = []   # (the old ones' indices, in order)
    done = 0                    # the old instructions before this index are placed
    # The old position from which old instructions are not placed yet
    # (but those pulled): that of insts[done].
    threshold = [0]

    def unplaced(x: HloInstruction) -> list[HloInstruction]:
        start = threshold[0]
        return [d for d in x.operands if id(d) not in pulled and
                (id(d) in new or positions[id(d)] >= start)]

    def unplaced_of_reader(reader: HloInstruction) -> list[HloInstruction]:
        # `unplaced(reader)` for an old reader at the place the loop below
        # has come to: what it read before came before it in the old
        # order, so only new operands can be unplaced, found by the list's
        # own search (a program's root tuple reads hundreds of values).
        operands = reader.operands
        if len(operands) <= 8:
            return unplaced(reader)
        found = []
        for d in added:
            if id(d) in pulled:
                continue
            k = -1
            while True:
                try:
                    k = operands.index(d, k + 1)   # identity: no `__eq__`
                except ValueError:
                    break
                found.append((k, d))
        found.sort(key=lambda item: item[0])
        return [d for _, d in found]

    order: list[HloInstruction] = []

    def place_until(end: int) -> None:
        # The old instructions from `done` to `end`, but those a walk placed.
        start = done
        for at in pulled_at[bisect_left(pulled_at, start):bisect_left(pulled_at, end)]:
            order.extend(insts[start:at])
            start = at + 1
        order.extend(insts[start:end])

    def walk(x: HloInstruction, reader: bool = False) -> None:
        successors = unplaced
        if reader:
            def successors(y: HloInstruction) -> list[HloInstruction]:
                return unplaced_of_reader(y) if y is x else unplaced(y)
        walked = post_order([x], successors, refuse_cycle)
        for w in walked:
            pulled.add(id(w))
            if id(w) not in new:
                insort(pulled_at, index(w))
        order.extend(walked)

    for at, reader in sorted({id(r): (index(r), r) for r in readers}.values(),
                             key=lambda item: item[0]):
        if insts[at] is not reader:
            return None
        place_until(at)
        done = at + 1
        threshold[0] = positions[id(insts[done])] if done < kept else inf
        if id(reader) in pulled:
            continue
        if unplaced_of_reader(reader):
            walk(reader, reader=True)
        else:
            order.append(reader)
    place_until(kept)
    done = kept
    threshold[0] = inf
    for x in insts[kept:]:
        if id(x) in pulled:
            continue
        if unplaced(x):
            walk(x)
        else:
            pulled.add(id(x))
            order.append(x)
    return order if len(order) == len(insts) else None


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
    readers = {id(u) for inst in insts[k:] for u in inst.users} - new
    # (the first of them in the list, found without a Python loop)
    return next(compress(count(), map(readers.__contains__, map(id, insts))), k)


def _trivial_operand(shared: HloInstruction) -> bool:
    """An operand whose readers are not merged as siblings: a scalar, a
    tuple, a constant, or under 64 bytes."""
    return is_effective_scalar(shared.shape) or shared.shape.is_tuple or \
        shared.opcode == "constant" or byte_size(shared.shape) < 64


def _common_prefix(before: list[HloInstruction], after: list[HloInstruction]) -> int:
    """How many leading instructions two orders share."""
    # (the first position where they differ, found without a Python loop)
    return next(compress(count(), map(is_not, before, after)), min(len(before), len(after)))

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
                           fusion_kind_for, fusion_roots, is_fusible, merge_fusions)
from .priority_fusion import FusionPass
from .util import byte_size, is_effective_scalar

__all__ = ["MultiOutputFusion", "ReachabilityMap"]


class ReachabilityMap:
    """For each instruction, the set of instructions it depends on
    (itself included; operands and control predecessors), as bitsets."""

    def __init__(self, comp: HloComputation):
        insts = comp.instructions
        self.index = {id(i): k for k, i in enumerate(insts)}
        by_name = {i.name: i for i in insts}
        self.ancestors: list[int] = [0] * len(insts)
        for k, inst in enumerate(insts):
            bits = 1 << k
            for o in inst.operands:
                bits |= self.ancestors[self.index[id(o)]]
            for name in inst.attrs.get(CONTROL_PREDECESSORS) or ():
                pred = by_name.get(name)
                if pred is not None:
                    bits |= self.ancestors[self.index[id(pred)]]
            self.ancestors[k] = bits

    def depends(self, a: HloInstruction, b: HloInstruction) -> bool:
        """Whether `a` (transitively) reads `b`."""
        return bool(self.ancestors[self.index[id(a)]] >> self.index[id(b)] & 1)


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
        if first.opcode != "fusion":
            first = create_fusion(first)
        if second.opcode != "fusion":
            second = create_fusion(second)
        fusion = merge_fusions(first, second)
        fusion.attrs["kind"] = fusion_kind_for(body_acceptable(fusion.attrs["calls"]))

    def _one_merge(self, comp: HloComputation) -> bool:
        """Finds and performs one merge (producer-consumer first, then
        siblings); False when none is left."""
        reach = ReachabilityMap(comp)
        insts = comp.instructions
        # Producer-consumer: a fusion with other users fused into a
        # consumer fusion as an extra output.
        for consumer in insts:
            if not _is_mergeable_fusion(consumer):
                continue
            for producer in dict.fromkeys(consumer.operands):
                if not _is_mergeable_fusion(producer) or producer.shape.is_tuple:
                    continue
                others = [u for u in producer.users if u is not consumer]
                if not others:
                    continue
                key = (id(producer), id(consumer))
                if key in self._refused:
                    continue
                if any(reach.depends(o, producer) for o in consumer.operands
                       if o is not producer) or not self._fits(producer, consumer) or \
                        not _shapes_compatible(_trial(producer, consumer)):
                    self._refused[key] = (producer, consumer)
                    continue
                self._merge(producer, consumer)
                return True
        # Siblings: fusions reading the same non-trivial operand.
        for shared in insts:
            if is_effective_scalar(shared.shape) or shared.shape.is_tuple:
                continue
            if shared.opcode == "constant" or byte_size(shared.shape) < 64:
                continue
            users = [u for u in dict.fromkeys(shared.users) if _is_mergeable_fusion(u)]
            for i, a in enumerate(users):
                for b in users[i + 1:]:
                    key = (id(a), id(b))
                    if key in self._refused:
                        continue
                    if reach.depends(a, b) or reach.depends(b, a) or \
                            not self._fits(a, b) or not _shapes_compatible(_trial(a, b)):
                        self._refused[key] = (a, b)
                        continue
                    self._merge(a, b)
                    return True
        return False

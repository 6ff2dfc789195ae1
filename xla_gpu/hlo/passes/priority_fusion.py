"""PriorityFusion, as XLA:GPU runs it: every fusible producer gets a
priority, the time the cost model saves by fusing it into all of its
consumers (duplicating it when there are several):

    priority = time(producer) + sum time(consumer_i) - sum time(consumer_i + producer)

The producer with the highest priority is fused first, into every consumer,
and the priorities of the new fusions and of their operands are recomputed;
fusion stops when no priority is positive (zero: a bitcast, free either
way, is fused so that its producer sees the real consumer).

A producer is fused only where the emitters can emit the result (one hero
kind per fusion, reductions and tiled transposes keeping their dedicated
emitters — checked on a trial body with the emitters' own rules, see
`fusion_utils.body_acceptable`): a reduction is fused only into an
elementwise epilogue of its single user (XLA's reduction epilogue fusion);
a reduction is never duplicated into a consumer that would recompute it per
element; in-place operands (a dynamic-update-slice's or scatter's buffer)
never receive producers. Dots, custom calls, control flow, sort and
parameters are never fused; effective-scalar constants are cloned into the
fusions that read them, larger constants stay operands.
"""

from __future__ import annotations

import heapq
from math import prod

from ...analysis.fusion import CARRYING_OPCODES, HERO_OPCODES
from ...analysis.shared_memory import input_bits
from ..fusions import ELEMENTWISE_OPCODES
from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction
from ..opcodes import ELEMENTWISE
from .cost_model import (NodeCost, absorbed_fusion_cost, fused_time, fusion_cost,
                         grown_fusion_cost, node_cost, wrapped_fusion_counts)
from .fusion_utils import (FUSIBLE_OPCODES, BodyInfo, _inline_into, absorb_consumer,
                           body_acceptable, create_fusion, fuse_producer,
                           fusion_kind_for, is_fusible, release_trial)
from .pipeline import ComputationPass
from .util import is_effective_scalar

__all__ = ["PriorityFusion", "FusionPass", "single_instruction_info"]

MAX_FUSION_INSTRUCTIONS = 320
MAX_OPERANDS_AND_OUTPUTS = 96

_LOOPLIKE = ("loop", "concatenate", "input_slices")

# A producer with at least this many consumers keeps its priority's terms
# between evaluations (`_PriorityFusionRun.wide`): a scalar read by a
# hundred fusions is pushed again each time one of them grows.
WIDE_PRODUCER_CONSUMERS = 8


# Lone instructions the loop emitter takes, whatever their operands: no
# hero of another emitter (reduce, transpose, concatenate, scatter, dot,
# slices, in-place update) and nothing it could refuse. Most instructions a
# fusion pass sees are these; the answer needs no trial body.
_LONE_LOOP_OPCODES = ELEMENTWISE | frozenset({"bitcast", "broadcast", "reshape"})


def single_instruction_info(inst: HloInstruction) -> BodyInfo:
    """The emitter a lone instruction would get as its own fusion."""
    if inst.opcode in _LONE_LOOP_OPCODES and not inst.shape.is_tuple:
        return BodyInfo("loop", [inst], True, plain=True)
    scratch = _scratch_body(inst, None)
    info = body_acceptable(scratch)
    release_trial(scratch)
    return info


# What a producer may hold for `_PriorityFusionRun.substitutes`: fusible ops
# (and a body's parameters) other than the heroes `find_hero` stops at and
# in-place updates.
_HERO_FREE_OPCODES = (FUSIBLE_OPCODES | frozenset({"parameter"})) - frozenset(
    HERO_OPCODES + ("dynamic-update-slice",))


def _hero_free(inst: HloInstruction, allowed: frozenset = _HERO_FREE_OPCODES) -> bool:
    """Whether `inst` (a fusion: its body) holds only `allowed` ops
    (`_HERO_FREE_OPCODES`)."""
    if inst.opcode != "fusion":
        return inst.opcode in allowed
    return all(i.opcode in allowed for i in inst.attrs["calls"]._instructions)


# What a producer may hold for `_PriorityFusionRun.loop_epilogue`: the
# hero-free ops and transposes.
_TRANSPOSES_AND_HERO_FREE_OPCODES = _HERO_FREE_OPCODES | frozenset({"transpose"})


def _cloned_constant(o: HloInstruction) -> bool:
    """Whether outside operand `o` is cloned into a trial body as a constant
    (`_scratch_body`), rather than read through a parameter."""
    return o.opcode == "constant" and is_effective_scalar(o.shape)


class _TrialView:
    """What `find_hero` sees in the trial body of `producer` fused into
    `consumer`, read off the consumer (its body, or the lone instruction)
    without building the trial: each of the consumer's parameters is, in
    the trial, the producer's value ("p"), a cloned constant ("c") or a
    parameter ("x")."""

    def __init__(self, producer: HloInstruction, consumer: HloInstruction):
        self.producer = producer
        self.consumer = consumer
        if consumer.opcode == "fusion":
            root = consumer.attrs["calls"].root
            self.index = next(k for k, o in enumerate(consumer.operands) if o is producer)
            self.roots = list(root.operands) if root.opcode == "tuple" else [root]
        else:
            self.index = -1
            self.roots = [consumer]
        self.producer_trivial = self._producer_trivial()

    def slot(self, o: HloInstruction) -> str | None:
        """"p", "c" or "x" for what stands for a parameter (an operand of a
        lone consumer) in the trial; None for an op of the body."""
        if self.index < 0:
            outer = o
        elif o.opcode == "parameter":
            if o.parameter_number == self.index:
                return "p"
            outer = self.consumer.operands[o.parameter_number]
        else:
            return None
        if outer is self.producer:
            return "p"
        return "c" if _cloned_constant(outer) else "x"

    def trivial(self, o: HloInstruction) -> bool:
        """`analysis.fusion.is_trivial_operand` of `o`'s value in the
        trial (a constant, or a broadcast of one or of a rank-0 value)."""
        while True:
            slot = self.slot(o)
            if slot is not None:
                return slot == "c" or (slot == "p" and self.producer_trivial)
            if o.opcode == "constant":
                return True
            if o.opcode != "broadcast":
                return False
            o = o.operands[0]
            if o.shape.rank == 0:
                return True

    def _producer_trivial(self) -> bool:
        """Whether the producer's value in the trial is a trivial operand,
        or no op of its own (a fusion whose root is a parameter)."""
        producer = self.producer
        if producer.opcode != "fusion":
            inst, params = producer, None
        else:
            inst, params = producer.attrs["calls"].root, producer.operands
            if inst.opcode == "parameter":
                return True
        while True:
            if inst.opcode == "constant":
                return True
            if inst.opcode != "broadcast":
                return False
            x = inst.operands[0]
            if x.shape.rank == 0:
                return True
            if params is None:
                return _cloned_constant(x)
            if x.opcode == "parameter":
                return _cloned_constant(params[x.parameter_number])
            inst = x

    def walks(self) -> tuple[bool, bool]:
        """(reads, enters) for `find_hero`'s walks from the trial's roots,
        followed through the consumer's ops: `reads`, whether a step looks
        at an op reading the producer's value; `enters`, whether a step
        would move onto it (the producer's value the one live operand).
        Without `reads` the walks are the consumer's, whatever the
        producer; without `enters`, when the producer's value is no trivial
        operand (the live operands are then the same)."""
        reads = enters = False
        for root in self.roots:
            if root.opcode == "get-tuple-element" and root.operands[0].opcode == "reduce":
                continue
            cur = root
            while cur.opcode not in HERO_OPCODES and (
                    cur.opcode in CARRYING_OPCODES or cur.opcode in ELEMENTWISE_OPCODES):
                operands = cur.operands
                if not reads and any(self.slot(o) == "p" for o in operands):
                    reads = True
                live = list(dict.fromkeys(o for o in operands if not self.trivial(o)))
                if len(live) != 1:
                    break
                x = live[0]
                slot = self.slot(x)
                if slot == "p":
                    enters = True
                    break
                if slot is not None or not (len(x.users) == 1 or x.opcode in HERO_OPCODES):
                    break
                cur = x
        return reads, enters

    def parameter_bits(self, fused: bool) -> int | None:
        """`analysis.shared_memory.input_bits` of the consumer's body
        parameters (`fused`: of the trial's)."""
        outer = list(self.consumer.operands)
        if fused:
            outer = [o for o in outer if o is not self.producer] + list(self.producer.operands)
        return input_bits([o.shape.element_type for o in outer
                           if not _cloned_constant(o) and not o.shape.is_tuple])


def _plain_info(fusion: HloInstruction) -> BodyInfo:
    """`body_acceptable` of a fusion made of two plain loop bodies (or lone
    plain ops): the loop emitter, the root its hero (the body is plain)."""
    return BodyInfo("loop", [fusion.attrs["calls"].root], True, plain=True)


def _scratch_body(consumer: HloInstruction, producer: HloInstruction | None) -> HloComputation:
    """A detached body computing `consumer` (its body, or the lone
    instruction) with `producer` fused in: what the fusion would be."""
    body = HloComputation("trial")
    params: dict[int, HloInstruction] = {}
    count = [0]

    def value_of(o: HloInstruction) -> HloInstruction:
        if id(o) not in params:
            if o.opcode == "constant" and is_effective_scalar(o.shape):
                params[id(o)] = body.add_instruction(o.clone_with([]), keep_name=True)
            else:
                p = HloInstruction.create_parameter(count[0], o.shape, f"p{count[0]}")
                count[0] += 1
                params[id(o)] = body.add_instruction(p, keep_name=True)
        return params[id(o)]

    if producer is not None:
        values = [value_of(o) for o in producer.operands]
        params[id(producer)] = _inline_into(body, producer, values)
    values = [value_of(o) for o in consumer.operands]
    result = _inline_into(body, consumer, values)
    body.set_root(result)
    return body


def _reduce_rooted(inst: HloInstruction) -> bool:
    """Whether tuple-shaped `inst` is a variadic reduce, or a fusion whose
    root is one (a single hero with several results, as an argmax's value
    and index: not a multi-output fusion, whose root is a tuple)."""
    if inst.opcode == "fusion":
        inst = inst.attrs["calls"].root
    return inst.opcode == "reduce"


class FusionPass(ComputationPass):
    """A fusion pass within XLA's limits: at most `max_fusion_instructions`
    instructions in a fusion, `max_operands` operands and outputs together.
    Fusion bodies it replaces are dropped."""
    prunes_computations = True

    def __init__(self, max_fusion_instructions: int = MAX_FUSION_INSTRUCTIONS,
                 max_operands: int = MAX_OPERANDS_AND_OUTPUTS):
        self.max_fusion_instructions = max_fusion_instructions
        self.max_operands = max_operands


class PriorityFusion(FusionPass):
    name = "priority-fusion"

    def run_on(self, comp: HloComputation) -> bool:
        return _PriorityFusionRun(self, comp).run()


class _PriorityFusionRun:
    def __init__(self, options: PriorityFusion, comp: HloComputation):
        self.options = options
        self.comp = comp
        # Nodes something must run after (control successors): never fused
        # into a consumer, which their successor may itself feed (the
        # fusion would then have to run both before and after it). Those
        # with control predecessors are not fusible at all (is_fusible).
        # A fusion made around such a node takes its edges, and its place
        # here (fuse_everywhere).
        self.ordered_before: set[int] = {
            id(p) for i in comp.instructions for p in i.control_predecessors()
        } if comp.has_control_edges() else set()
        self.costs: dict[int, NodeCost] = {}
        self.infos: dict[int, BodyInfo] = {}
        self.reducer_cache: dict = {}
        self.version: dict[int, int] = {}
        self.heap: list = []
        self.order: dict[int, int] = {}
        self.alive: dict[int, HloInstruction] = {}
        self.sequence = 0
        # Node versions (bumped when a node changes) and, per producer and
        # consumer, the legality and fused time computed at those versions
        # (see `legal`; a producer's entries go when it changes).
        self.node_version: dict[int, int] = {}
        self.pairs: dict[int, dict[int, list]] = {}
        # Per (producer, consumer), the trial body's BodyInfo and what it
        # was built from (see `_fused_info`).
        self.trials: dict[tuple[int, int], tuple] = {}
        # Per node, `_hero_free` of it as it is now.
        self.hero_free: dict[int, bool] = {}
        # Per node, the checks of `producer_ok` and `can_fuse` that read
        # only the node itself (opcode, shape, attributes, BodyInfo), as
        # it is now. Kept only for nodes without control predecessors: one
        # with some becomes fusible when they go away with a removed
        # instruction, without changing otherwise.
        self.as_producer: dict[int, bool] = {}
        self.as_consumer: dict[int, bool] = {}
        # Per fusion whose cost is cached, its parameters' counts when
        # `grown_fusion_cost` may start from them.
        self.counts: dict[int, list[float]] = {}
        # Per producer of at least WIDE_PRODUCER_CONSUMERS consumers: its
        # version key when the entry was made, and per consumer (by id) the
        # consumer, its time and its time with the producer fused in, for
        # the consumers that have not changed since (see `_wide_priority`).
        self.wide: dict[int, tuple[tuple[int, int], dict[int, tuple]]] = {}
        self.max_size = options.max_fusion_instructions
        self.max_operands = options.max_operands

    # -- caches ---------------------------------------------------------
    def cost(self, inst: HloInstruction) -> NodeCost:
        c = self.costs.get(id(inst))
        if c is None:
            if inst.opcode == "fusion":
                c, counts = fusion_cost(inst, self.reducer_cache)
                if counts is not None:
                    self.counts[id(inst)] = counts
            else:
                c = node_cost(inst, self.reducer_cache)
            self.costs[id(inst)] = c
        return c

    def info(self, inst: HloInstruction) -> BodyInfo:
        i = self.infos.get(id(inst))
        if i is None:
            if inst.opcode == "fusion":
                i = body_acceptable(inst.attrs["calls"])
            else:
                i = single_instruction_info(inst)
            self.infos[id(inst)] = i
        return i

    def size(self, inst: HloInstruction) -> int:
        if inst.opcode == "fusion":
            return len(inst.attrs["calls"])
        return 1

    def forget(self, inst: HloInstruction) -> None:
        key = id(inst)
        self.costs.pop(key, None)
        self.counts.pop(key, None)
        self.infos.pop(key, None)
        self.hero_free.pop(key, None)
        self.as_producer.pop(key, None)
        self.as_consumer.pop(key, None)
        # Its pairs as a producer were computed at an older version.
        self.pairs.pop(key, None)
        wide = self.wide
        if wide:
            wide.pop(key, None)
            # Its terms in the priorities of the wide producers it reads:
            # it changed, or it goes (a consumer replaced by a fusion, a
            # producer fused everywhere), or it reads them anew.
            for o in inst.operands:
                entry = wide.get(id(o))
                if entry is not None:
                    entry[1].pop(key, None)
        versions = self.node_version
        versions[key] = versions.get(key, 0) + 1

    def legal(self, producer: HloInstruction, consumer: HloInstruction,
              vp: tuple[int, int] | None = None) -> list:
        """The pair's cache entry, [producer's version, consumer's version,
        can fuse, fused time or None until asked], its legality computed
        for the two as they are now (kept until either changes). `vp`:
        `producer_key(producer)`, when the caller has it."""
        if vp is None:
            vp = self.producer_key(producer)
        vc = self.node_version.get(id(consumer), 0)
        entries = self.pairs.get(id(producer))
        if entries is None:
            entries = self.pairs[id(producer)] = {}
        hit = entries.get(id(consumer))
        if hit is not None and hit[0] == vp and hit[1] == vc:
            return hit
        entry = [vp, vc, self.can_fuse(producer, consumer), None]
        entries[id(consumer)] = entry
        return entry

    def producer_key(self, producer: HloInstruction) -> tuple[int, int]:
        """What a pair's verdict read of the producer: its version, and for
        a reduction its users' count (a reduction fuses only into a single
        user; no other check of `can_fuse`, nor the fused time, reads the
        producer's users)."""
        version = self.node_version.get(id(producer), 0)
        info = self.infos.get(id(producer))
        if info is None:
            info = self.info(producer)
        return (version, len(producer.users) if info.kind == "reduction" else -1)

    def fused_time(self, producer: HloInstruction, consumer: HloInstruction,
                   entry: list) -> float:
        """The time of `consumer` with `producer` fused in, for a pair that
        can fuse (`entry`, from `legal`, holds it once computed)."""
        time = entry[3]
        if time is None:
            time = entry[3] = fused_time(producer, self.cost(producer), consumer,
                                         self.cost(consumer))
        return time

    # -- legality ---------------------------------------------------------
    def producer_ok(self, producer: HloInstruction) -> bool:
        if self.ordered_before and id(producer) in self.ordered_before:
            return False
        ok = self.as_producer.get(id(producer))
        if ok is None:
            ok = self._producer_kind_ok(producer)
            if not producer.attrs.get(CONTROL_PREDECESSORS):
                self.as_producer[id(producer)] = ok
        return ok and producer is not self.comp.root and bool(producer.users)

    def _producer_kind_ok(self, producer: HloInstruction) -> bool:
        """What `producer_ok` checks of the node itself."""
        if producer.opcode in ("parameter", "constant", "get-tuple-element", "tuple"):
            return False
        if not is_fusible(producer) or producer.shape.is_tuple:
            return False
        info = self.info(producer)
        if not info.ok:
            return False
        if info.kind in ("scatter", "in_place_dynamic_update_slice"):
            return False
        if producer.opcode == "dynamic-update-slice":
            return False
        return True

    def consumer_ok(self, consumer: HloInstruction) -> bool:
        """Whether `consumer` may receive producers at all."""
        if consumer.opcode in ("parameter", "constant", "tuple", "get-tuple-element"):
            return False
        if consumer.opcode == "bitcast":
            return False  # the bitcast fuses into its own consumers first
        if not is_fusible(consumer):
            return False
        if consumer.shape.is_tuple and not _reduce_rooted(consumer):
            return False
        return True

    def can_fuse(self, producer: HloInstruction, consumer: HloInstruction) -> bool:
        ok = self.as_consumer.get(id(consumer))
        if ok is None:
            ok = self.consumer_ok(consumer)
            if not consumer.attrs.get(CONTROL_PREDECESSORS):
                self.as_consumer[id(consumer)] = ok
        if not ok:
            return False
        size = len(producer.attrs["calls"]) if producer.opcode == "fusion" else 1
        size += len(consumer.attrs["calls"]) if consumer.opcode == "fusion" else 1
        if size > self.max_size:
            return False
        shape = consumer.shape
        outputs = len(shape.leaves()) if shape.tuple_shapes is not None else 1
        c_operands, p_operands = consumer.operands, producer.operands
        # The distinct operands number at most all of them: counted only
        # when that bound is over the limit.
        if len(c_operands) + len(p_operands) + outputs > self.max_operands:
            operands = len({id(o) for o in c_operands if o is not producer} |
                           {id(o) for o in p_operands})
            if operands + outputs > self.max_operands:
                return False
        infos = self.infos
        p_info = infos.get(id(producer)) or self.info(producer)
        c_info = infos.get(id(consumer)) or self.info(consumer)
        if not c_info.ok:
            return False
        # The producer passed `producer_ok` (its BodyInfo is ok), and
        # `body_acceptable` accepts a reduce only in a reduction: a producer
        # of any other kind has none, and no body needs scanning for one.
        simple = p_info.kind in _LOOPLIKE and c_info.kind in _LOOPLIKE
        if simple:
            return True
        if p_info.kind == "reduction":
            # Reduction epilogue fusion: only into the single user.
            if len(producer.users) != 1:
                return False
        if p_info.kind == "reduction" and c_info.kind != "reduction" and \
                self.refused_epilogue(producer, consumer):
            return False
        if c_info.kind in ("reduction", "transpose") and \
                self.substitutes(producer, consumer, c_info):
            trial = BodyInfo(c_info.kind, c_info.heroes, True, "", c_info.hero_kind,
                             c_info.reads_parameter_types)
        elif c_info.hero_kind == "loop" and p_info.kind == "transpose" and \
                self.loop_epilogue(producer, consumer):
            trial = BodyInfo("loop", c_info.heroes, True)
        else:
            scratch = _scratch_body(consumer, producer)
            trial = body_acceptable(scratch)
            release_trial(scratch)
        if not trial.ok:
            return False
        if p_info.kind == "reduction" and trial.kind != "reduction":
            return False
        if c_info.kind not in _LOOPLIKE and trial.kind != c_info.kind:
            return False  # the consumer's emitter must stay (in-place DUS...)
        self.trials[(id(producer), id(consumer))] = (
            producer, consumer, self.node_version.get(id(producer), 0),
            self.node_version.get(id(consumer), 0), list(producer.operands),
            list(consumer.operands), trial)
        return True

    def substitutes(self, producer: HloInstruction, consumer: HloInstruction,
                    c_info: BodyInfo) -> bool:
        """Whether the trial body of `producer` fused into `consumer` (one
        the emitters take, `c_info`, of another kind than a scatter or an
        in-place update, which read their parameters' users; not a plain
        loop body, whose verdict took the plain shortcut) gets the
        consumer's own verdict, without building it. The trial is
        the consumer's body with the producer's ops in place of one
        parameter; the emitter choice (`analysis.fusion.choose_emitter`)
        and the checks of `body_acceptable` read the roots, their heroes and
        the ops between them, what reaches the heroes, the reduces and
        transposes of the body, and the narrowest parameter type. When the
        producer holds no hero nor in-place update (`_hero_free`), none of
        that changes but the parameters: the roots are the consumer's (none
        is the parameter replaced), each hero walk reaches the same hero
        (one that moves onto the producer's value finds no hero there and
        ends at the root, as it did at the parameter; when that value is a
        trivial operand, which the walks skip, no walk may look at an op
        reading it), and the producer's ops reach no hero. A verdict that
        read the parameter types is reused when the narrowest is the same;
        none is where the trial would clone a scalar constant that the
        consumer's body reads as a parameter."""
        free = self.hero_free.get(id(producer))
        if free is None:
            free = self.hero_free[id(producer)] = _hero_free(producer)
        if not free:
            return False
        if consumer.opcode == "fusion" and any(_cloned_constant(o) for o in consumer.operands):
            return False
        view = _TrialView(producer, consumer)
        if any(r.opcode == "parameter" for r in view.roots):
            return False
        if view.producer_trivial and view.walks()[0]:
            return False
        if c_info.reads_parameter_types and \
                view.parameter_bits(False) != view.parameter_bits(True):
            return False
        return True

    def loop_epilogue(self, producer: HloInstruction, consumer: HloInstruction) -> bool:
        """Whether the trial body of `producer` (of the transpose emitter)
        fused into `consumer` (one the loop emitter takes, its heroes
        calling for no other) certainly goes to the loop emitter too, which
        takes it, without building it. When the producer holds nothing but
        hero-free ops and transposes and no hero walk from the consumer's
        roots moves onto the producer's value (nor, were that value a
        trivial operand, looks at an op reading it), each walk ends where
        it did in the consumer: the heroes are the consumer's, none a
        reduce or tiled transpose. Nor can the producer's ops make another
        emitter's pattern: the roots are the consumer's (no input slices,
        no in-place update over a parameter that was not one before), and
        they hold no dot, concatenate, reduce or in-place update. The
        verdict is the consumer's, for a body that is not plain."""
        if not _hero_free(producer, _TRANSPOSES_AND_HERO_FREE_OPCODES):
            return False
        view = _TrialView(producer, consumer)
        if any(r.opcode == "parameter" for r in view.roots):
            return False
        reads, enters = view.walks()
        return not enters and not (view.producer_trivial and reads)

    def refused_epilogue(self, producer: HloInstruction, consumer: HloInstruction) -> bool:
        """Whether the trial body of reduction `producer` fused into
        `consumer` (a fusion or op without a reduce: one the emitters take
        with another emitter than the reduction's) is certainly refused,
        without building it: the body holds the producer's reduce, so only
        the reduction emitter may take it (`body_acceptable`), and it does
        not when no hero walk from the roots moves onto the producer's value
        (nor, were that value a trivial operand, looks at an op reading
        it): the heroes are then the consumer's own, none a reduce."""
        view = _TrialView(producer, consumer)
        if any(r.opcode == "parameter" for r in view.roots):
            return False
        reads, enters = view.walks()
        return not enters and not (view.producer_trivial and reads)

    def _substituted_info(self, producer: HloInstruction,
                          consumer: HloInstruction) -> BodyInfo | None:
        """The BodyInfo of fusion `consumer` with `producer` fused in, as it
        is about to be built, when it is the consumer's own (see
        `substitutes`: the built body is the trial's graph when the
        consumer reads no scalar constant); None when that is not known.
        A plain consumer body is left out: with a producer that is not
        plain, the body would no longer be."""
        if consumer.opcode != "fusion":
            return None
        c_info = self.info(consumer)
        if not c_info.ok or c_info.plain or c_info.kind not in _LOOPLIKE + (
                "reduction", "transpose"):
            return None
        if not self.substitutes(producer, consumer, c_info):
            return None
        return BodyInfo(c_info.kind, c_info.heroes, True, "", c_info.hero_kind,
                        c_info.reads_parameter_types)

    def _fused_info(self, producer: HloInstruction, consumer: HloInstruction) -> BodyInfo | None:
        """The BodyInfo of the trial body `can_fuse` built for fusing
        `producer` into `consumer` as they are now, None when there is none.
        The fusion about to be built is the trial's graph (instructions in
        another order, other parameter numbers and names, which the emitter
        choice does not read) when both are unchanged since (same versions,
        same operands) and no operand is a scalar constant (the trial
        clones those in; a fusion keeps one it writes in place as a
        parameter): its BodyInfo is the trial's, without analysing the
        body again."""
        entry = self.trials.pop((id(producer), id(consumer)), None)
        if entry is None:
            return None
        p, c, vp, vc, p_operands, c_operands, trial = entry
        if p is not producer or c is not consumer or \
                vp != self.node_version.get(id(producer), 0) or \
                vc != self.node_version.get(id(consumer), 0):
            return None
        for now, then in ((producer.operands, p_operands), (consumer.operands, c_operands)):
            if len(now) != len(then) or any(a is not b for a, b in zip(now, then)):
                return None
            if any(o.opcode == "constant" and is_effective_scalar(o.shape) for o in now):
                return None
        return trial

    # -- priorities ---------------------------------------------------------
    def priority(self, producer: HloInstruction) -> float | None:
        comp = self.comp
        if producer.parent is not comp:
            return None
        key = id(producer)
        # `producer_ok`, its cache read inline.
        ok = self.as_producer.get(key)
        if ok is None:
            ok = self.producer_ok(producer)
        users = producer.users
        if not ok or producer is comp.root or not users:
            return None
        consumers = list(dict.fromkeys(users)) if len(users) > 1 else users
        # Legality first, for every consumer: the costs (a new fusion's is
        # computed on first use) are needed only when all of them can fuse.
        # What a cost reads (the node, its operands' shapes) changes only
        # with the node itself, which `forget` drops from the cache, so a
        # cost computed later is the one computed now.
        # `legal` is inlined where its cache holds the answer (most
        # consumers of a producer pushed again are unchanged).
        pairs, versions, costs = self.pairs, self.node_version, self.costs
        info = self.infos.get(key)
        if info is None:
            info = self.info(producer)
        # `producer_key`
        vp = (versions.get(key, 0), len(users) if info.kind == "reduction" else -1)
        if len(consumers) >= WIDE_PRODUCER_CONSUMERS:
            return self._wide_priority(producer, consumers, vp)
        mine = pairs.get(key) or {}
        entries = []
        for c in consumers:
            hit = mine.get(id(c))
            if hit is None or hit[0] != vp or hit[1] != versions.get(id(c), 0):
                hit = self.legal(producer, c, vp)
            if not hit[2]:
                return None
            entries.append(hit)
        cost = costs.get(key)
        unfused = (cost if cost is not None else self.cost(producer)).time
        fused = 0.0
        for c, entry in zip(consumers, entries):
            time = entry[3]
            if time is None:
                time = self.fused_time(producer, c, entry)
            cost = costs.get(id(c))
            unfused += (cost if cost is not None else self.cost(c)).time
            fused += time
        return unfused - fused

    def _wide_priority(self, producer: HloInstruction, consumers: list[HloInstruction],
                       vp: tuple[int, int]) -> float | None:
        """`priority` of a producer with many consumers, from the terms of
        the last evaluation for the consumers unchanged since. A consumer
        that changes, goes or reads the producer anew passes through
        `forget`, which drops its term; a change of the producer drops the
        entry. The sums are `priority`'s, in the same order (the same
        floats); legality of every consumer comes first, as there."""
        key = id(producer)
        entry = self.wide.get(key)
        if entry is None or entry[0] != vp:
            entry = self.wide[key] = (vp, {})
        terms = entry[1]
        missing = []
        for c in consumers:
            term = terms.get(id(c))
            if term is None or term[0] is not c:
                pair = self.legal(producer, c, vp)
                if not pair[2]:
                    return None
                missing.append((c, pair))
        for c, pair in missing:
            terms[id(c)] = (c, self.cost(c).time, self.fused_time(producer, c, pair))
        unfused = self.cost(producer).time
        fused = 0.0
        for c in consumers:
            term = terms[id(c)]
            unfused += term[1]
            fused += term[2]
        return unfused - fused

    def push(self, inst: HloInstruction) -> None:
        key = id(inst)
        self.version[key] = self.version.get(key, 0) + 1
        p = self.priority(inst)
        if p is None or p < 0:
            return
        self.alive[key] = inst
        self.sequence += 1
        heapq.heappush(self.heap, (-p, self.order.get(key, 0), self.sequence, key,
                                   self.version[key]))

    # -- the loop -------------------------------------------------------------
    def run(self) -> bool:
        comp = self.comp
        for k, inst in enumerate(comp.instructions):
            self.order[id(inst)] = k
        for inst in list(comp.instructions):
            self.push(inst)
        changed = False
        while self.heap:
            _, _, _, key, version = heapq.heappop(self.heap)
            if self.version.get(key) != version:
                continue
            producer = self.alive.get(key)
            if producer is None or producer.parent is not comp:
                continue
            # The entry is the producer's latest push, and its priority is
            # still the one pushed: what it reads (the producer, its
            # users, their costs and the pairs' verdicts) changes only in
            # a fusion that touches the producer or one of its consumers,
            # and every fusion pushes again what it touched and their
            # operands (the producer among them). Not computed again.
            self.fuse_everywhere(producer)
            changed = True
        return changed

    def fuse_everywhere(self, producer: HloInstruction) -> None:
        comp = self.comp
        consumers = list(dict.fromkeys(producer.users))
        if producer.opcode == "fusion" and len(consumers) == 1 and \
                self.size(producer) > self.size(consumers[0]):
            if id(consumers[0]) in self.ordered_before:   # its successors are the fusion's
                self.ordered_before.add(id(producer))
            self.absorb(producer, consumers[0])
            return
        touched: list[HloInstruction] = []
        producer_plain = self.info(producer).plain
        for consumer in consumers:
            position = self.order.get(id(consumer), 0)
            known = self._fused_info(producer, consumer)
            plain = known is None and producer_plain and self.info(consumer).plain
            if known is None and not plain:
                known = self._substituted_info(producer, consumer)
            # The consumer's cost as it is (a fusion's, with its parameters'
            # counts; a lone op's, as the fusion wrapped around it would
            # have), to derive the grown fusion's from.
            before = None
            cost = self.costs.get(id(consumer))
            if cost is not None:
                if consumer.opcode == "fusion":
                    counts = self.counts.get(id(consumer))
                else:
                    counts = wrapped_fusion_counts(consumer, cost)
                if counts is not None:
                    before = (cost, counts, list(consumer.operands))
            if consumer.opcode != "fusion":
                self.forget(consumer)
                self.version[id(consumer)] = self.version.get(id(consumer), 0) + 1
                wrapped = consumer
                consumer = create_fusion(consumer)
                if id(wrapped) in self.ordered_before:   # the fusion took its edges
                    self.ordered_before.add(id(consumer))
            fuse_producer(consumer, producer)
            self.forget(consumer)
            if before is not None:
                grown = grown_fusion_cost(*before, producer, consumer,
                                          self.costs.get(id(producer)),
                                          self.counts.get(id(producer)))
                if grown is not None:
                    self.costs[id(consumer)], self.counts[id(consumer)] = grown
            self.order[id(consumer)] = position
            if known is not None:
                self.infos[id(consumer)] = known
            elif plain:
                self.infos[id(consumer)] = _plain_info(consumer)
            info = self.info(consumer)
            consumer.attrs["kind"] = fusion_kind_for(info)
            touched.append(consumer)
        self.version[id(producer)] = self.version.get(id(producer), 0) + 1
        self.alive.pop(id(producer), None)
        operands = list(producer.operands)
        if not producer.users and producer is not comp.root:
            comp.remove_instruction(producer)
            self.forget(producer)
        update = list(dict.fromkeys([*touched, *operands,
                                     *(o for t in touched for o in t.operands)]))
        never = self.as_producer
        for inst in update:
            # A node found to be no producer as it is now (a parameter, a
            # constant, a dot...) has no priority, hence no entry in the
            # heap: a push would only find that again.
            if inst.parent is comp and never.get(id(inst)) is not False:
                self.push(inst)

    def absorb(self, producer: HloInstruction, consumer: HloInstruction) -> None:
        """Fuses a large producer fusion into its only consumer by cloning
        the consumer into the producer's body (see absorb_consumer)."""
        position = self.order.get(id(consumer), 0)
        known = self._fused_info(producer, consumer)
        plain = known is None and self.info(producer).plain and self.info(consumer).plain
        if known is None and not plain:
            known = self._substituted_info(producer, consumer)
        self.version[id(consumer)] = self.version.get(id(consumer), 0) + 1
        self.alive.pop(id(consumer), None)
        # The producer's cost as it is, to derive the grown fusion's from.
        before = None
        counts, cost = self.counts.get(id(producer)), self.costs.get(id(producer))
        if counts is not None and cost is not None and producer.shape.tuple_shapes is None:
            before = (cost, counts, list(producer.operands), prod(producer.shape.dims))
        self.forget(consumer)
        fusion = absorb_consumer(producer, consumer)
        self.forget(fusion)
        if before is not None:
            grown = absorbed_fusion_cost(*before, consumer, fusion)
            if grown is not None:
                self.costs[id(fusion)], self.counts[id(fusion)] = grown
        self.order[id(fusion)] = position
        if known is not None:
            self.infos[id(fusion)] = known
        elif plain:
            self.infos[id(fusion)] = _plain_info(fusion)
        fusion.attrs["kind"] = fusion_kind_for(self.info(fusion))
        never = self.as_producer
        for inst in dict.fromkeys([fusion, *fusion.operands]):
            # (no producer as it is now: no priority, see `fuse_everywhere`)
            if inst.parent is self.comp and never.get(id(inst)) is not False:
                self.push(inst)

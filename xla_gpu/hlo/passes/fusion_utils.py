"""Building fusions: wrap an instruction into a fusion, fuse a producer into
a fusion (duplicating it when it stays needed elsewhere), merge two fusions
into one multi-output fusion, and say whether the passes may build a
fusion body: the emitter `xla_gpu.analysis.fusion` chooses for it (the one
decision, also the emitters') must take it, and no reduction may be
computed again per element (`body_acceptable`).

Fusion bodies follow XLA's conventions: parameters `param_N`, effective
scalar constants cloned inside (never passed as operands), the fusion
instruction's operands distinct, a multi-output fusion's root a `tuple`
whose users read it through `get-tuple-element`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable

from ...analysis.fusion import choose_emitter, find_hero, gives_several_outputs
from ...analysis.reduction import heroes_read_elsewhere, reduction_shared_need
from ...analysis.shared_memory import static_shared_budget
from ...analysis.transpose import transpose_shared_bytes
from ..fusions import ELEMENTWISE_OPCODES
from ..opcodes import ELEMENTWISE
from ..in_place import in_place_outputs
from ..module import (CONTROL_PREDECESSORS, HloComputation, HloInstruction,
                      HloModule)
from ..shape import Shape
from .util import is_effective_scalar

__all__ = ["FUSIBLE_OPCODES", "create_fusion", "fuse_producer", "absorb_consumer",
           "merge_fusions", "build_merged_body", "merged_first_outputs",
           "TrialMerge", "trial_merge",
           "fusion_roots", "body_acceptable", "BodyInfo", "is_fusible",
           "fusion_kind_for", "hero_names", "release_trial"]

# Ops the fusion emitters compute (elementally or as heroes).
FUSIBLE_OPCODES = ELEMENTWISE_OPCODES | frozenset({
    "broadcast", "transpose", "reshape", "bitcast", "slice", "reverse",
    "iota", "concatenate", "pad", "dynamic-slice", "dynamic-update-slice",
    "gather", "reduce", "reduce-window", "scatter", "constant",
})

def moves_host_memory(inst: HloInstruction) -> bool:
    """A copy to, from or in host memory (memory space 5, an offload's
    move): a memcpy, never part of a kernel."""
    return inst.opcode == "copy" and not inst.shape.is_tuple and bool(
        inst.shape.memory_space or inst.operands[0].shape.memory_space)


def is_fusible(inst: HloInstruction) -> bool:
    """Whether `inst` may go into a fusion at all."""
    if inst.opcode == "fusion":
        kind = str(inst.attrs.get("kind", "kLoop"))
        return kind in ("kLoop", "kInput")
    if inst.opcode not in FUSIBLE_OPCODES:
        return False
    if inst.attrs.get(CONTROL_PREDECESSORS):
        return False
    if moves_host_memory(inst):
        return False   # a memcpy of its own
    if inst.opcode == "constant":
        return is_effective_scalar(inst.shape)
    if inst.opcode == "scatter":
        return len(inst.operands) == 3 and not inst.shape.is_tuple
    if inst.opcode == "reduce" and inst.shape.is_tuple:
        # Variadic reductions (argmax) fuse as heroes; their results are
        # read through get-tuple-element, which fuses with them.
        return True
    if inst.shape.is_tuple:
        return False
    return True


# ----------------------------------------------------------- body analysis


def fusion_roots(body: HloComputation) -> list[HloInstruction]:
    """The values of a body these passes build: the root tuple's operands
    (outputs are one flat tuple), else the root."""
    root = body.root
    if root.opcode == "tuple":
        return list(root.operands)
    return [root]


@dataclass
class BodyInfo:
    """The emitter a fusion body gets (`xla_gpu.analysis.fusion`'s
    decision) and whether the fusion passes accept the body."""
    kind: str                 # the emitter that emits it
    heroes: list[HloInstruction]
    ok: bool
    reason: str = ""
    hero_kind: str = ""       # the emitter XLA would choose for the heroes
    # Whether the verdict read the body's parameter types (a column
    # reduction's shared memory, through its vector width).
    reads_parameter_types: bool = False
    # Whether the body is a plain loop body (`_plain_loop_body`); a body
    # made of two of them is one too.
    plain: bool = False

    def __post_init__(self) -> None:
        self.hero_kind = self.hero_kind or self.kind


def body_acceptable(body: HloComputation) -> BodyInfo:
    """The emitter `xla_gpu.analysis.fusion` chooses for `body`, and
    whether the fusion passes may build it: the emitter the heroes call for
    must take it (a reduction or a tiled transpose sent to the loop
    emitter, or a scatter nobody emits, is refused; a concatenate emitted
    by the loop emitter is fine: that emitter also reads every element
    once), and the passes' own limits hold:

    * outputs are one flat tuple (merging reads them through
      get-tuple-element) or one op's results;
    * no reduction is computed again per element: a reduce hero read by
      anything but its own epilogue (another reduction's input, a side
      output, another epilogue), or any reduce in a fusion of another
      kind, would be recomputed by each thread that reads it;
    * the emitter's preferred tiles fit a block's shared memory (XLA's
      FusionFitsInBudget): the tiles of every reduced value of a
      multi-output reduction, or of every transpose, together. (The
      emitters would shrink their tiles to fit; the passes rather keep
      such reductions in separate kernels.)

    (Multi-output fusion adds XLA's shape rules for several roots.)"""
    root = body.root
    if _plain_loop_body(body):
        # No hero of another emitter and nothing any emitter would refuse:
        # the analysis below would choose the loop emitter with the root as
        # its hero. Most bodies the fusion passes ask about are these.
        return BodyInfo("loop", [root], True, plain=True)
    if root.opcode == "tuple" and any(r.shape.is_tuple for r in root.operands):
        return BodyInfo("loop", [], False, "nested tuple outputs")
    if root.opcode != "tuple" and root.shape.is_tuple and not gives_several_outputs(root):
        return BodyInfo("loop", [], False, f"a tuple-shaped {root.opcode} root")
    choice = choose_emitter(fusion_roots(body))
    info = BodyInfo(choice.kind, choice.heroes, True, "", choice.hero_kind)
    if choice.refusal is not None and choice.hero_kind != "concatenate":
        info.ok, info.reason = False, choice.refusal
    elif info.kind == "reduction":
        inner = _large_inner_reduce(body, choice.heroes)
        if heroes_read_elsewhere(choice.roots, choice.heroes):
            info.ok, info.reason = False, "a reduction would be computed again elementally " \
                "where another reduction, side output or epilogue reads it"
        elif inner is not None:
            info.ok, info.reason = False, f"reduce '{inner.name}' feeds the reduction and " \
                "would be computed elementally, again for every element read"
        else:
            parameters = [p.shape.element_type for p in body.parameters
                          if not p.shape.is_tuple]
            need, info.reads_parameter_types = reduction_shared_need(
                choice.roots, choice.heroes, parameters)
            _check_shared_memory(info, "reduction", need)
    else:
        reduce = next((i for i in body.instructions if i.opcode == "reduce"), None)
        if reduce is not None:
            info.ok, info.reason = False, \
                f"reduce '{reduce.name}' would be recomputed per element"
        elif info.kind == "transpose":
            _check_shared_memory(info, "transpose", transpose_shared_bytes(choice.roots,
                                                                           choice.heroes))
    return info


# Ops whose bodies the loop emitter takes whatever their mix: elementwise
# ops (not `map`, which calls a computation), bitcasts, broadcasts,
# reshapes, and the parameters and constants they read. None is a hero
# (reduce, transpose, concatenate, scatter, dot), a slice, or an in-place
# update.
_PLAIN_LOOP_OPCODES = ELEMENTWISE | frozenset({"bitcast", "broadcast", "reshape",
                                                "parameter", "constant"})


def _plain_loop_body(body: HloComputation) -> bool:
    """Whether `body` has one array output computed by `_PLAIN_LOOP_OPCODES`
    alone."""
    root = body.root
    if root is None or root.shape.is_tuple or root.opcode in ("parameter", "constant"):
        return False
    plain = _PLAIN_LOOP_OPCODES
    for inst in body._instructions:
        if inst.opcode not in plain:
            return False
    return True


# A reduce that is not a hero is evaluated elementally where it is read: a
# loop over its reduced elements per element read. XLA fuses such a reduce
# as a producer only when it is not a reduction the reduction emitter would
# take itself (IsLoopFusibleAsProducer); here, only when each of its
# results reduces at most this many elements.
MAX_ELEMENTAL_REDUCE_SIZE = 32


def _large_inner_reduce(body: HloComputation,
                        heroes: list[HloInstruction]) -> HloInstruction | None:
    """A reduce of `body` that is none of its heroes and reduces more than
    MAX_ELEMENTAL_REDUCE_SIZE elements into each result (the second half
    of a split row reduction fused into the first: every thread of the
    outer reduction would run the inner one's whole loop)."""
    hero_ids = {id(h) for h in heroes}
    for inst in body.instructions:
        if inst.opcode != "reduce" or id(inst) in hero_ids:
            continue
        dims = inst.operands[0].shape.dims
        reduced = prod(dims[d] for d in inst.attrs.get("dimensions", ()))
        if reduced > MAX_ELEMENTAL_REDUCE_SIZE:
            return inst
    return None


def _check_shared_memory(info: BodyInfo, emitter: str, need: int) -> None:
    budget = static_shared_budget()
    if need > budget:
        info.ok, info.reason = False, f"the {emitter} emitter's tiles would take {need} " \
            f"bytes of shared memory, over the {budget} a block has"


def fusion_kind_for(info: BodyInfo) -> str:
    """XLA's fusion kind: kInput for the emitters that read their input in
    their own order (reduction, transpose, scatter), kLoop otherwise."""
    return "kInput" if info.hero_kind in ("reduction", "transpose", "scatter") else "kLoop"


def hero_names(body: HloComputation) -> str:
    """XLA's RenameFusions: the sorted distinct opcodes of the roots'
    heroes, '-' as '_'."""
    names = sorted({find_hero(r).opcode for r in fusion_roots(body)
                    if not r.shape.is_tuple or r.opcode == "reduce"})
    return "_".join(names).replace("-", "_") or "fusion"


# ------------------------------------------------------------- building


def _module_of(comp: HloComputation) -> HloModule:
    if comp.module is None:
        raise comp.root.error("the computation is not linked to a module") \
            if comp.root is not None else ValueError("unlinked computation")
    return comp.module


def _new_parameter(body: HloComputation, number: int, shape: Shape) -> HloInstruction:
    param = HloInstruction.create_parameter(number, shape, f"param_{number}")
    return body.add_instruction(param)


def create_fusion(inst: HloInstruction, kind: str = "kLoop",
                  name: str | None = None,
                  computation_name: str | None = None) -> HloInstruction:
    """Replaces `inst` by a fusion instruction whose body computes it;
    effective-scalar constant operands move into the body. Returns the
    fusion."""
    comp = inst.parent
    module = _module_of(comp)
    body = HloComputation(computation_name or "fused_computation")
    body.module = module
    operands: list[HloInstruction] = []
    mapped: dict[int, HloInstruction] = {}
    # An operand written in place (a scatter's, a dynamic-update-slice's
    # operand 0) stays a parameter even when it is a small constant: the
    # scatter emitter writes over its parameter's buffer, and copy insertion
    # gives the fusion a copy of the constant to write.
    written = {inst.operands[k] for k, _ in in_place_outputs(inst)}
    params: dict[int, HloInstruction] = {}
    for o in inst.operands:
        if id(o) in mapped:
            continue
        if o.opcode == "constant" and is_effective_scalar(o.shape) and o not in written:
            mapped[id(o)] = body.add_instruction(o.clone_with([]))
        else:
            param = params[len(operands)] = _new_parameter(body, len(operands), o.shape)
            mapped[id(o)] = param
            operands.append(o)
    body._fusion_params = params
    clone = inst.clone_with([mapped[id(o)] for o in inst.operands])
    clone.attrs.pop(CONTROL_PREDECESSORS, None)
    body.add_instruction(clone)
    body.set_root(clone)
    # (every name in the body is the module's `unique_name`: taken)
    module.add_computation(body, before=comp, names_taken=True)
    attrs = {"kind": kind, "calls": body}
    if "metadata" in inst.attrs:
        attrs["metadata"] = inst.attrs["metadata"]
    fusion = HloInstruction(name or "fusion", "fusion", inst.shape, operands, attrs)
    fusion.location = inst.location
    comp.add_instruction(fusion)
    inst.replace_with(fusion)
    return fusion


def _inline_into(body: HloComputation, source: HloInstruction,
                 values: list[HloInstruction]) -> HloInstruction:
    """Clones `source` (a plain instruction or a fusion, whose operands are
    `values` in `body`) into `body`; returns the value of its result."""
    # A trial body (no module): names do not matter, and the clones are
    # made here with operands already in it, so they are appended without
    # add_instruction's checks and naming (the fusion passes build tens of
    # thousands of trial instructions).
    if body.module is None:
        def clone(inst: HloInstruction, operands: list[HloInstruction]) -> HloInstruction:
            return _trial_clone(body, inst, operands)
    else:
        # A body of the module: the same clone, named as `add_instruction`
        # names it (the module's `unique_name` of the source's name, taken
        # before the clone is in the body), without its checks of operands
        # that are the body's by construction.
        module = body.module

        def clone(inst: HloInstruction, operands: list[HloInstruction]) -> HloInstruction:
            names = module._names
            if names is None:
                names = module._instruction_names()
            name = names.get(inst.name)
            copy = _trial_clone(body, inst, operands)
            copy.name = name
            return copy
    if source.opcode != "fusion":
        return clone(source, list(values))
    inner = source.attrs["calls"]
    local: dict[int, HloInstruction] = {}
    for inst in inner.instructions:
        if inst.opcode == "parameter":
            local[id(inst)] = values[inst.parameter_number]
        else:
            local[id(inst)] = clone(inst, [local[id(o)] for o in inst.operands])
    return local[id(inner.root)]


def _trial_clone(body: HloComputation, source: HloInstruction,
                 operands: list[HloInstruction]) -> HloInstruction:
    """`source.clone_with(operands)` without control predecessors, appended
    to `body` (a user of each of its distinct operands, in operand order),
    built without the dataclass constructor (the trial bodies are most of
    the instructions the fusion passes create): the fields are
    HloInstruction's, as clone_with sets them. Its name is the source's
    (`_inline_into` names the clones of a module's body)."""
    attrs = dict(source.attrs)
    attrs.pop(CONTROL_PREDECESSORS, None)
    inst = object.__new__(HloInstruction)
    inst.__dict__.update(name=source.name, opcode=source.opcode, shape=source.shape,
                         operands=operands, attrs=attrs, literal=source.literal,
                         parameter_number=source.parameter_number,
                         location=source.location, users=[], parent=body)
    if len(operands) == 1:
        operands[0].users.append(inst)
    else:
        linked: set[int] = set()
        for op in operands:
            if id(op) not in linked:
                linked.add(id(op))
                op.users.append(inst)
    body._instructions.append(inst)
    return inst


def release_trial(body: HloComputation) -> None:
    """Unlinks a trial body once analysed (`HloComputation.release`):
    without this each trial would stay in memory until the cyclic garbage
    collector found it, and the fusion passes build thousands (whose
    collection rescans the whole module each time). What the analysis
    returned (a BodyInfo's heroes) stays readable as detached
    instructions."""
    body.release()


def _parameters_by_number(body: HloComputation) -> dict[int, HloInstruction]:
    """`body.parameter(n)` for every n, from one pass over the body (the
    first parameter of each number, as `parameter` finds it)."""
    params: dict[int, HloInstruction] = {}
    for inst in [i for i in body._instructions if i.opcode == "parameter"]:
        params.setdefault(inst.parameter_number, inst)
    return params


def _fusion_parameters(fusion: HloInstruction) -> dict[int, HloInstruction]:
    """`_parameters_by_number` of the fusion's body, kept on the body
    between the fusions that grow it (priority fusion grows one body a
    producer at a time, and a scan of the whole body per producer made
    each fusion cost as much as its body). The kept table is used only
    when it still describes the body: one parameter of this body per
    fusion operand, numbered 0..n-1 as its keys (a valid body has no other
    parameter), which a look at the table alone tells; otherwise the body
    is scanned again."""
    body = fusion.attrs["calls"]
    params = body.__dict__.get("_fusion_params")
    n = len(fusion.operands)
    if params is not None and len(params) == n:
        for k, p in params.items():
            if p.parent is not body or p.parameter_number != k or \
                    p.opcode != "parameter" or not 0 <= k < n:
                break
        else:
            return params
    params = body._fusion_params = _parameters_by_number(body)
    return params


def _operand_values(fusion: HloInstruction, operands: list[HloInstruction],
                    params: dict[int, HloInstruction] | None = None) -> list[HloInstruction]:
    """Body values for `operands` (outside instructions): the parameter of
    an existing fusion operand, a clone of a scalar constant, or a new
    parameter (the operand appended to the fusion's operands). `params`:
    the body's `_parameters_by_number`, kept up to date when given."""
    body = fusion.attrs["calls"]
    if params is None:
        params = _parameters_by_number(body)
    values = []
    fusion_operands = fusion.operands
    for o in operands:
        # `in` and `index` compare by identity: instructions have no
        # `__eq__` (and a failed `index` would print the instruction).
        if o in fusion_operands:
            values.append(params[fusion_operands.index(o)])
        elif o.opcode == "constant" and is_effective_scalar(o.shape):
            values.append(body.add_instruction(o.clone_with([])))
        else:
            number = len(fusion.operands)
            param = _new_parameter(body, number, o.shape)
            params.setdefault(number, param)
            values.append(param)
            fusion_operands.append(o)
            if fusion not in o.users:   # identity, as above
                o.users.append(fusion)
    return values


def _remove_fusion_operand(fusion: HloInstruction, index: int,
                           params: dict[int, HloInstruction] | None = None) -> None:
    """Drops operand `index` and its (now unused) parameter, renumbering
    the parameters after it (`params`: the body's `_parameters_by_number`,
    every parameter of a valid body; stale afterwards)."""
    body = fusion.attrs["calls"]
    if params is None:
        params = _parameters_by_number(body)
    param = params[index]
    if param.users:
        raise param.error("internal: removing a fusion parameter still in use")
    body.remove_instruction(param)
    for p in params.values():
        if p.parameter_number > index:
            p.parameter_number -= 1
    old = fusion.operands.pop(index)
    if old not in fusion.operands:   # identity: instructions have no `__eq__`
        for k, u in enumerate(old.users):
            if u is fusion:
                del old.users[k]
                break


def fuse_producer(fusion: HloInstruction, producer: HloInstruction) -> None:
    """Fuses `producer` (an operand of `fusion`) into the fusion's body.
    The producer stays in its computation for its other users (the caller
    removes it when it has none)."""
    index = fusion.operands.index(producer)   # identity: no `__eq__`
    body = fusion.attrs["calls"]
    was_ordered = not body._unordered and not body.has_control_edges()
    params = _fusion_parameters(fusion)
    insts = body._instructions
    start = len(insts)
    values = _operand_values(fusion, list(producer.operands), params)
    result = _inline_into(body, producer, values)
    added = body._instructions[start:]
    param = params[index]
    # Where the removed parameter was: every reader of it comes later.
    first = insts.index(param) if was_ordered and body._instructions is insts else 0
    param.replace_all_uses_with(result)
    _remove_fusion_operand(fusion, index, params)
    # The parameters after `index` were renumbered down by one.
    body._fusion_params = {(k if k < index else k - 1): p
                           for k, p in params.items() if k != index}
    fusion.parent._mark_unordered()
    if was_ordered:
        _order_fused_producer(body, added, result, first)


def _order_fused_producer(body: HloComputation, added: list[HloInstruction],
                          result: HloInstruction, first: int = 0) -> None:
    """Puts `body` (in order before `fuse_producer` appended `added`, the
    producer's instructions ending at `result`, and made the removed
    parameter's readers read `result`) in the order its sort
    (`_restore_order`) would give, without the sort's walk over every
    instruction: what precedes the first reader stays, the sort's
    depth-first walk from that reader places what it needs, and everything
    after is then placed as it comes (its operands are all placed by then).
    Left to the sort when the case is not that one. `first`: a position at
    or before the first reader.

    Only the producer's instructions and the body's parameters after the
    first reader can be unplaced there (the rest before the reader is in
    order, the rest after it reads nothing the walk needs), so the work is
    the producer's size, not the body's, but for list copies."""
    insts = body._instructions
    base = len(insts) - len(added)
    if base < 0 or insts[base:] != added:   # identity: no `__eq__`
        return
    added_ids = set(map(id, added))
    if id(result) not in added_ids:
        return
    readers = [u for u in result.users if id(u) not in added_ids]
    if not readers:
        return
    if first > base:
        first = 0
    # The first reader: the earliest position any reader has. A lone one
    # (most often) by the list's own scan, which stops at it (identity: no
    # `__eq__`); it is there in a body that was in order, so the exception,
    # whose message prints the instruction, is rare. Several by one scan
    # for all (the list's own would raise for each after the first).
    if len(readers) == 1:
        try:
            k = insts.index(readers[0], first, base)
        except ValueError:
            return
    else:
        reader_ids = set(map(id, readers))
        k = next((j for j in range(first, base) if id(insts[j]) in reader_ids), None)
    if k is None:
        return
    # An instruction before the reader is placed; after it, only the
    # producer's and those of the old body after the reader are not.
    rest = insts[k + 1:base]
    late: dict[int, bool] = {}

    def unplaced(d: HloInstruction) -> bool:
        key = id(d)
        if key in added_ids:
            return True
        v = late.get(key)
        if v is None:
            v = late[key] = d in rest   # identity: no `__eq__`
        return v

    # `post_order([insts[k]], unplaced operands)` (the graph is acyclic):
    # each node is expanded once, its operands taken left to right, and
    # listed after them; inlined, as the walk is most of the work here.
    walked: list[HloInstruction] = []
    walked_ids: set[int] = set()
    stack: list[tuple[HloInstruction, bool]] = [(insts[k], False)]
    pop, push = stack.pop, stack.append
    while stack:
        node, expanded = pop()
        key = id(node)
        if expanded:
            walked_ids.add(key)
            walked.append(node)
        elif key not in walked_ids:
            push((node, True))
            for d in reversed(node.operands):
                if id(d) not in walked_ids and unplaced(d):
                    push((d, False))
    if any(late.values()):
        rest = [i for i in rest if id(i) not in walked_ids]
    body._instructions = insts[:k] + walked + rest + \
        [a for a in added if id(a) not in walked_ids]
    body._unordered = False
    body._valid_prefix = 0


def absorb_consumer(fusion: HloInstruction, consumer: HloInstruction) -> HloInstruction:
    """The same result as fusing `fusion` into `consumer` (its only user),
    built the other way round: the consumer is cloned into the fusion's
    body, which takes the consumer's place. Cheaper when the fusion is the
    larger of the two (a long chain grows without being copied again)."""
    comp = fusion.parent
    body = fusion.attrs["calls"]
    values = []
    params = _fusion_parameters(fusion)
    for o in consumer.operands:
        if o is fusion:
            values.append(body.root)
        else:
            values.extend(_operand_values(fusion, [o], params))
    result = _inline_into(body, consumer, values)
    body.set_root(result)
    fusion.shape = consumer.shape
    if "metadata" in consumer.attrs:
        fusion.attrs["metadata"] = consumer.attrs["metadata"]
    consumer.replace_with(fusion)
    comp._mark_unordered()
    return fusion


def _fusion_outputs(inst: HloInstruction, result: HloInstruction) -> list[HloInstruction]:
    """The values of `inst`'s outputs once inlined as `result` (one per
    element of a multi-output fusion's root tuple, else one)."""
    if inst.opcode == "fusion" and inst.attrs["calls"].root.opcode == "tuple":
        return list(result.operands)
    return [result]


def merged_first_outputs(first: HloInstruction, second: HloInstruction,
                         first_multi: bool) -> list[int]:
    """The numbers of `first`'s outputs that a merge of `first` and
    `second` keeps (in order): those read elsewhere than by `second`.
    `first_multi`: whether first has several outputs (a tuple)."""
    comp = first.parent
    first_users = [u for u in first.users if u is not second]
    if first_multi:
        return sorted({u.attrs["index"] for u in first_users
                       if u.opcode == "get-tuple-element" and
                       (any(x is not second for x in u.users) or u is comp.root)})
    if first_users or first is comp.root:
        return [0]
    return []


def build_merged_body(body: HloComputation, first: HloInstruction, second: HloInstruction,
                      value_of: Callable[[HloInstruction], HloInstruction],
                      made: list[HloInstruction] | None = None
                      ) -> tuple[list[int], list[HloInstruction], bool]:
    """Inlines `first` and then `second` (which may read first's outputs)
    into `body`, other operands through `value_of` (their value in the
    body), and roots it at the merged outputs: first's that are read
    elsewhere than `second`, then all of second's (a tuple when more than
    one); what is dead afterwards (the inlined bodies' root tuples) is
    removed. Returns (the numbers of first's kept outputs, the outputs,
    whether first has several outputs); `made`, when given, gets every
    instruction added to the body, in order (the dead ones included)."""
    first_result = _inline_into(body, first, [value_of(o) for o in first.operands])
    first_outputs = _fusion_outputs(first, first_result)
    second_values = []
    for o in second.operands:
        if o is first:
            second_values.append(first_outputs[0] if len(first_outputs) == 1 else first_result)
        elif o.opcode == "get-tuple-element" and o.operands[0] is first:
            second_values.append(first_outputs[o.attrs["index"]])
        else:
            second_values.append(value_of(o))
    second_outputs = _fusion_outputs(second, _inline_into(body, second, second_values))
    first_multi = len(first_outputs) > 1 or first.shape.is_tuple
    kept = merged_first_outputs(first, second, first_multi)
    outputs = [first_outputs[k] for k in kept] + second_outputs
    if len(outputs) == 1:
        root = outputs[0]
    else:
        shape = Shape("", (), None, tuple(o.shape for o in outputs))
        if body.module is None:
            # A trial body: its names do not matter (`_adopt_trial` gives
            # them), so none is made unique.
            root = body.add_instruction(HloInstruction.create("tuple", shape, outputs),
                                        keep_name=True)
        else:
            root = body.add("tuple", shape, outputs)
    body.set_root(root)
    if made is not None:
        made.extend(body._instructions)
    body.remove_dead()
    return kept, outputs, first_multi


class TrialMerge:
    """The body a merge would have, built detached (`trial_merge`) for the
    passes to analyse before they decide. Of two fusions, it is what
    `merge_fusions` would build but for the names, which
    `merge_fusions(..., trial=...)` gives it (adopting it) in the order the
    build would have: a merge they decide on need not be built again."""

    __slots__ = ("first", "second", "body", "operands", "kept", "outputs", "first_multi",
                 "made", "tuple_root")

    def __init__(self, first: HloInstruction, second: HloInstruction):
        self.first, self.second = first, second
        body = self.body = HloComputation("fused_computation")
        operands: list[HloInstruction] = []
        params: dict[int, HloInstruction] = {}

        def value_of(o: HloInstruction) -> HloInstruction:
            # `merge_fusions`'s value_of: a parameter numbered (and named)
            # as it numbers them, or a clone of a scalar constant.
            v = params.get(id(o))
            if v is None:
                if o.opcode == "constant" and is_effective_scalar(o.shape):
                    v = body.add_instruction(o.clone_with([]), keep_name=True)
                else:
                    number = len(operands)
                    v = body.add_instruction(HloInstruction.create_parameter(
                        number, o.shape, f"param_{number}"), keep_name=True)
                    operands.append(o)
                params[id(o)] = v
            return v

        self.made: list[HloInstruction] = []
        self.kept, self.outputs, self.first_multi = build_merged_body(
            body, first, second, value_of, self.made)
        self.operands = operands
        self.tuple_root = body.root if len(self.outputs) > 1 else None

    def release(self) -> None:
        """Drops the body (`release_trial`), when no merge adopts it."""
        release_trial(self.body)


def trial_merge(first: HloInstruction, second: HloInstruction) -> TrialMerge:
    """The detached body of a merge of `first` and `second` (either may be
    a lone instruction), as `merge_fusions` orders its outputs."""
    return TrialMerge(first, second)


def _adopt_trial(trial: TrialMerge, module: HloModule) -> HloComputation:
    """The trial's body, made the merged body `merge_fusions` would build:
    each instruction named as that build names it, in the order it does
    (parameters `param_N`, the root tuple `tuple`, the rest after what
    they copy), and the names of those it then drops as dead given back."""
    body = trial.body
    body.module = module
    unique_name = module.unique_name
    tuple_root = trial.tuple_root
    for inst in trial.made:
        inst.name = unique_name("tuple" if inst is tuple_root else inst.name)
    for inst in trial.made:
        if inst.parent is not body:
            module.release_name(inst.name)
    return body


def merge_fusions(first: HloInstruction, second: HloInstruction,
                  name: str = "fusion", trial: TrialMerge | None = None) -> HloInstruction:
    """Merges two fusions of one computation into one multi-output fusion
    (`second` may read `first`: a producer-consumer multi-output fusion).
    Outputs: first's (kept only where read by others than `second`), then
    second's. Users are rewired through get-tuple-element; returns the new
    fusion. `trial`: the `trial_merge` of the two, as they are now, whose
    body becomes the merged one (the result is the same)."""
    comp = first.parent
    module = _module_of(comp)
    if trial is None:
        trial = TrialMerge(first, second)
    elif trial.first is not first or trial.second is not second:
        raise first.error("internal: the trial body is another merge's")
    body = _adopt_trial(trial, module)
    operands = trial.operands
    kept_first, outputs, first_multi = trial.kept, trial.outputs, trial.first_multi
    second_outputs = outputs[len(kept_first):]
    root = body.root
    # (`_adopt_trial` named the body's instructions: their names are taken)
    module.add_computation(body, before=comp, names_taken=True)
    attrs = {"kind": "kLoop", "calls": body}
    for src in (second, first):
        if "metadata" in src.attrs:
            attrs["metadata"] = src.attrs["metadata"]
            break
    fusion = HloInstruction(name, "fusion", root.shape, operands, attrs)
    comp.add_instruction(fusion)
    multi = len(outputs) > 1

    def read(k: int) -> HloInstruction:
        if not multi:
            return fusion
        return comp.add("get-tuple-element", outputs[k].shape, [fusion], index=k)

    # Rewire first's users.
    for pos, k in enumerate(kept_first):
        value = None
        if first_multi:
            for u in list(first.users):
                if u.opcode == "get-tuple-element" and u.attrs["index"] == k:
                    value = value or read(pos)
                    u.replace_all_uses_with(value)
        else:
            value = read(pos)
            others = [u for u in first.users if u is not second]
            first.replace_all_uses_with(value, users=others)
            if first is comp.root:
                comp.set_root(value)
    # Rewire second's users.
    offset = len(kept_first)
    if second.shape.is_tuple and second.opcode == "fusion" and \
            second.attrs["calls"].root.opcode == "tuple":
        for u in list(second.users):
            if u.opcode == "get-tuple-element":
                u.replace_all_uses_with(read(offset + u.attrs["index"]))
        if second is comp.root:
            leaves = [read(offset + k) for k in range(len(second_outputs))]
            comp.set_root(comp.add("tuple", second.shape, leaves))
    else:
        value = read(offset)
        second.replace_all_uses_with(value)
    # Control dependencies of the merged instructions move to the fusion.
    for old in (first, second):
        for pred in old.control_predecessors():
            if pred is not first and pred is not second:
                fusion.add_control_predecessor(pred)
        for succ in old.control_successors():
            succ.remove_control_predecessor(old)
            succ.add_control_predecessor(fusion)
    # Remove the old instructions and first's get-tuple-elements (each now
    # unused or read only by `second`).
    dead = [u for u in second.users if u.opcode == "get-tuple-element"] + [second] + \
        [u for u in first.users if u is not second] + [first]
    comp.remove_instructions(dead)
    return fusion

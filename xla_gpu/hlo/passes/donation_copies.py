"""Must-alias donations made to hold whatever order the scheduler picks
(the part of XLA's copy insertion that serves input_output_alias:
AddCopiesForAliasedInputOutputs, then the removal of the copies whose live
ranges would not interfere).

`input_output_alias={ {0}: (0, {}, must-alias) }` promises that output {0}
is written into parameter 0's own buffer. That holds only when every read
of the parameter's old content comes before the first write of the
output's buffer, except a read by that writer itself at the very element
it writes (an elementwise update such as `p - lr * g`). XLA copies the
parameter in and the output out, then drops the copies whose removal the
ordering allows; here the same outcome is reached directly, per donation:

* the readers of the parameter can all run before the output's first
  writer (none of them needs the writer's result, and the writer reads the
  parameter only where it may write over it): control edges from those
  readers to the writer, and no copy;
* the first writer is the copy that copy insertion put between the
  parameter and a loop (or an in-place update) that writes it: that copy
  goes, the loop starts from the parameter's own buffer, and its other
  readers run before the loop (control edges);
* otherwise (a reduction of the parameter fused with its update, a later
  kernel that reads both the parameter and the update, a loop that reads
  the parameter while it computes the output): the output is computed into
  a buffer of its own and copied into the parameter's buffer by a copy at
  the result, after every reader of the parameter (control edges).

May-alias donations are left alone: buffer assignment honours them where
the schedule allows and drops them otherwise, as they permit.

The analyses are those buffer assignment uses (dataflow values, alias
analysis buffers, the in-place and elementwise sharing rules), so that what
is ordered here is what it then accepts.
"""

from __future__ import annotations

from ...errors import HloError
from ...service.alias_analysis import (AliasAnalysis, elementwise_share_pairs,
                                       in_place_pairs, parse_input_output_alias)
from ...service.dataflow import DataflowAnalysis
from ..graph import reachable
from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction, HloModule

__all__ = ["honour_must_alias_donations", "own_output_indices"]


def honour_must_alias_donations(module: HloModule) -> bool:
    """Adds the control edges, and where those cannot do, the copies, that
    let every must-alias donation of `module` share its parameter's buffer
    under any schedule of the ENTRY. Returns whether the module changed."""
    try:
        donations = [d for d in parse_input_output_alias(module) if d.must_alias]
    except HloError:
        return False    # buffer assignment refuses the header, naming it
    if not donations:
        return False
    entry = module.entry
    try:
        analysis = _Analysis(module)
    except HloError:
        return False    # (e.g. a shared loop body) refused later, named there
    params = {p.parameter_number: p for p in entry.parameters}
    changed = False
    for d in donations:
        bypassed = False
        while True:
            param = params.get(d.parameter)
            df, alias = analysis.df, analysis.alias
            if param is None or not df.has_value(param, d.parameter_index) or \
                    not df.has_value(entry.root, d.output_index):
                break    # buffer assignment names the bad alias
            p_value = df.value_at(param, d.parameter_index)
            out_value = df.value_at(entry.root, d.output_index)
            if alias.same_buffer(p_value, out_value):
                break    # the output is the parameter (passed through)
            p_buffer = alias.find(p_value)
            p_values = alias.buffer_values(p_value)
            if any(pos is entry.root for v in p_values for pos, _ in v.positions):
                break    # also another output: no copy can make it alias
            readers = {id(r): r for r in (analysis.entry_level(use.instruction)
                                          for v in p_values for use in v.uses)}
            writer, out_index = _first_writer(analysis, out_value)
            others = [r for r in readers.values() if r is not writer]
            ordered = writer is not None
            if ordered and id(writer) in readers:
                # The writer may read the parameter only where it writes over
                # it: the output's own element, through an operand it shares.
                ordered = out_index is not None and \
                    _reads_only_where_it_writes(writer, p_buffer, out_index, df, alias)
            if ordered:
                after = analysis.descendants(writer)
                ordered = not any(id(r) in after for r in others)
            if ordered:
                before = analysis.ancestors(writer)
                for reader in others:
                    if id(reader) not in before:
                        analysis.add_edge(reader, writer)
                        changed = True
                break
            if not bypassed and writer is not None and \
                    _bypass_parameter_copy(analysis, writer, p_value, others):
                # The loop or in-place update now starts from the parameter
                # itself: its other readers run first, and this donation is
                # looked at again.
                bypassed = changed = True
                analysis = _Analysis(module)
                continue
            # The output into a buffer of its own, copied into the parameter's
            # once every reader of the parameter has run (none can depend on
            # the fresh copy).
            root = entry.root
            copy = _copy_result_leaf(entry, d.output_index)
            changed = True
            if entry.root is not root:
                analysis = _Analysis(module)
            elif copy.users == [root]:
                # The copy's value is a buffer of its own that only the result
                # holds: the other donations' values and buffers stay as they
                # were, only the graph has grown by the copy.
                analysis.preds[id(copy)] = [copy.operands[0]]
                analysis.succs.setdefault(id(copy.operands[0]), []).append(copy)
                analysis.preds[id(root)].append(copy)
                analysis.succs[id(copy)] = [root]
            else:
                analysis.link()   # tuples rebuilt below the root
            before = analysis.ancestors(copy)
            for reader in readers.values():
                if id(reader) not in before:
                    analysis.add_edge(reader, copy)
            break
    return changed


def _bypass_parameter_copy(analysis: "_Analysis", writer: HloInstruction, p_value,
                           others: list[HloInstruction]) -> bool:
    """When the output's first writer is a copy of the donated parameter
    (copy insertion's guard of a parameter that a loop or an in-place
    update would write), its users take the parameter itself: the loop
    state or the update is then the parameter's own buffer, as the
    donation asks, with no copy in or out. Only where the parameter's other
    readers can all run before those users (control edges are added) and
    no user reads the parameter another way. Returns whether it did."""
    df, alias, entry = analysis.df, analysis.alias, analysis.entry
    # One user (the loop's initial state, the update): a copy that others
    # read too is the buffer they read while the loop writes it.
    if writer.opcode != "copy" or len(writer.users) != 1 or \
            not df.has_value(writer.operands[0]) or \
            df.value_at(writer.operands[0]) is not p_value:
        return False
    source = writer.operands[0]
    p_buffer = alias.find(p_value)
    users = list(writer.users)
    for user in users:
        if user is entry.root or user.parent is not entry:
            return False
        for operand in user.operands:
            if operand is not writer and any(alias.find(v) == p_buffer
                                             for _, v in df.leaf_values(operand)):
                return False
    after = analysis.descendants(writer)
    if any(id(r) in after for r in others):
        return False
    for user in users:
        before = analysis.ancestors(user)
        for reader in others:
            if id(reader) not in before:
                analysis.add_edge(reader, user)
        user.replace_uses_of(writer, source)
    entry.remove_instruction(writer)
    return True


def own_output_indices(entry: HloComputation) -> set[tuple[int]]:
    """The indices (k,) of the ENTRY's result tuple elements that are the
    very parameter leaf a must-alias donation binds to output k (a donated
    array returned unchanged): that output is the parameter's buffer as it
    is, and a copy would make it another."""
    module = getattr(entry, "module", None)
    root = entry.root
    if module is None or root is None or root.opcode != "tuple":
        return set()
    try:
        donations = parse_input_output_alias(module)
    except HloError:
        return set()
    own = set()
    for d in donations:
        if not d.must_alias or len(d.output_index) != 1 or \
                d.output_index[0] >= len(root.operands):
            continue
        inst, index = root.operands[d.output_index[0]], ()
        while inst.opcode == "get-tuple-element":
            inst, index = inst.operands[0], (inst.attrs["index"],) + index
        if inst.opcode == "parameter" and inst.parent is entry and \
                inst.parameter_number == d.parameter and index == tuple(d.parameter_index):
            own.add(tuple(d.output_index))
    return own


class _Analysis:
    """Dataflow values and buffers of the module, with the ENTRY's
    dependency graph (operands and control edges) kept up to date as
    control edges are added."""

    def __init__(self, module: HloModule):
        self.module = module
        self.entry = module.entry
        self.df = DataflowAnalysis(module)
        self.alias = AliasAnalysis(self.df)
        self.link()

    def link(self) -> None:
        """The ENTRY's dependency graph, read anew."""
        self.preds: dict[int, list[HloInstruction]] = {}
        self.succs: dict[int, list[HloInstruction]] = {}
        by_name = self.entry.name_map()
        for inst in self.entry.instructions:
            preds = list(inst.operands) + [by_name[n] for n in
                                           inst.attrs.get(CONTROL_PREDECESSORS) or ()
                                           if n in by_name]
            self.preds[id(inst)] = preds
            for p in preds:
                self.succs.setdefault(id(p), []).append(inst)

    def entry_level(self, inst: HloInstruction) -> HloInstruction:
        """The ENTRY instruction that runs `inst` (itself when in the
        ENTRY; the while, conditional or call around it otherwise)."""
        while inst.parent is not self.entry:
            caller = self.df.caller(inst.parent)
            if caller is None:
                break
            inst = caller[0]
        return inst

    def ancestors(self, inst: HloInstruction) -> set[int]:
        return {id(n) for n in reachable([inst], lambda n: self.preds.get(id(n), ()))}

    def descendants(self, inst: HloInstruction) -> set[int]:
        return {id(n) for n in reachable([inst], lambda n: self.succs.get(id(n), ()))}

    def add_edge(self, pred: HloInstruction, inst: HloInstruction) -> None:
        inst.add_control_predecessor(pred)
        self.preds.setdefault(id(inst), []).append(pred)
        self.succs.setdefault(id(pred), []).append(inst)


def _first_writer(analysis: _Analysis, out_value) -> tuple[HloInstruction | None, tuple | None]:
    """The ENTRY instruction that writes the output's buffer first (every
    other ENTRY writer of it depends on it), and the output index at which
    it defines the buffer's value when it does so itself (not through a
    computation it runs); (None, None) when there is no such writer or the
    buffer also holds a parameter or constant."""
    entry = analysis.entry
    writers: dict[int, HloInstruction] = {}
    own_index: dict[int, tuple] = {}
    for v in analysis.alias.buffer_values(out_value):
        if v.is_phi:
            continue
        if v.instruction.opcode in ("parameter", "constant"):
            return None, None
        inst = analysis.entry_level(v.instruction)
        if inst.parent is not entry:
            return None, None
        writers[id(inst)] = inst
        if v.instruction is inst:
            own_index[id(inst)] = v.index
    for inst in writers.values():
        if all(id(inst) in analysis.ancestors(other) for other in writers.values()):
            return inst, own_index.get(id(inst))
    return None, None


def _reads_only_where_it_writes(writer: HloInstruction, buffer: int, out_index: tuple,
                                df: DataflowAnalysis, alias: AliasAnalysis) -> bool:
    """Whether `writer` reads `buffer` only through operand leaves it may
    write over into its output leaf `out_index` (in place, or elementwise:
    buffer assignment's rule for writing over a dying operand)."""
    slots = {(k, oi, out)
             for k, oi, out in in_place_pairs(writer) + elementwise_share_pairs(writer)}
    for k, operand in enumerate(writer.operands):
        for index, value in df.leaf_values(operand):
            if alias.find(value) == buffer and (k, index, tuple(out_index)) not in slots:
                return False
    return True


def _copy_result_leaf(entry: HloComputation, index: tuple) -> HloInstruction:
    """Puts a copy at leaf `index` of the ENTRY's result (rebuilding the
    tuples above it that are not the root's own) and returns the copy."""
    def rebuild(inst: HloInstruction, rest: tuple) -> tuple[HloInstruction, HloInstruction]:
        if not rest:
            copy = entry.add("copy", inst.shape, [inst])
            return copy, copy
        if inst.opcode == "tuple":
            elements = list(inst.operands)
        else:
            elements = [entry.add("get-tuple-element", s, [inst], index=k)
                        for k, s in enumerate(inst.shape.tuple_shapes)]
        new, copy = rebuild(elements[rest[0]], rest[1:])
        if inst.opcode == "tuple" and inst is entry.root:
            inst.replace_operand_with(rest[0], new)
            return inst, copy
        elements[rest[0]] = new
        return entry.add("tuple", inst.shape, elements), copy

    root, copy = rebuild(entry.root, tuple(index))
    if root is not entry.root:
        entry.set_root(root)
    return copy

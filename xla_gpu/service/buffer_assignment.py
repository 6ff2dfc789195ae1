"""Buffer assignment: where every array of a scheduled module lives (XLA's
BufferAssigner).

    schedule = schedule_module(module)
    assignment = assign_buffers(module, schedule)
    assignment.allocations            # [Allocation]: parameters, outputs,
                                      # constants, one temp
    assignment.slice(inst, (1,))      # BufferSlice of inst's leaf {1}
    assignment.memory_analysis().temp_size_in_bytes
    print(assignment.to_text())       # like XLA's buffer-assignment.txt

Steps: dataflow values (`dataflow`), buffers of values that must share
(`alias_analysis`: loop state, conditional results), live ranges over the
flattened schedule (`liveness`), then the optional merges that hold when
the schedule allows them (in-place dynamic-update-slice / scatter /
custom-call aliasing, donated parameters, elementwise reuse), then the
allocations: each entry parameter leaf and each entry output leaf its own
(an output that is a parameter, donated or forwarded, is that parameter's
allocation), each constant its own (it lives in the executable). As in
XLA, a temporary may borrow the bytes of an output (or donated parameter)
allocation at offset 0 while nothing placed there is live; every other
buffer is packed by the heap simulator into one temp allocation.

Sharing rules, and what a thunk emitter must do about them:

* an in-place writer whose operand could not share its output's buffer
  (`in_place_operands(inst)` says `shared=False`) must copy the operand
  into the output first;
* with `share_elementwise` (the default), an elementwise instruction or a
  loop fusion may get the same bytes as input and output: it reads that
  operand only at the element it writes (same dimensions, layout and
  element size), never through another operand;
* a donated parameter's allocation is written (it holds the aliased
  output, and temporaries once the parameter is dead).

Modules whose aliasing would overwrite a value still needed (a loop state
element read after the body rewrote it, a read-only parameter written by a
loop...) are refused with an error naming the instruction: XLA's copy
insertion adds the copies such modules need.
"""

from __future__ import annotations

import bisect

from ..errors import HloError, ResourceError
from ..hlo.module import CONTROL_PREDECESSORS, HloInstruction, HloModule
from ..hlo.shape import HOST_MEMORY_SPACE
from ..runtime.buffers import Allocation, BufferSlice
from ..runtime.program import MemoryAnalysis
from .alias_analysis import (AliasAnalysis, InputOutputAlias, elementwise_share_pairs,
                             in_place_pairs, parse_input_output_alias)
from .dataflow import (INT64_MAX, DataflowAnalysis, HloValue, ShapeIndex,
                       array_leaves, sequential_callees, where)
from .heap_simulator import HeapItem, merge_intervals, pack
from .liveness import Interval, LiveRanges

__all__ = ["BufferAssignment", "MemoryAnalysis", "assign_buffers"]

DEFAULT_ALIGNMENT = 64


def _copy_needed(inst: HloInstruction, message: str) -> HloError:
    return HloError(f"{where(inst)}{message}; the module needs a copy there "
                    "(XLA's copy insertion adds it)")


class _BufferSet:
    """Buffers as union-find roots with their values and merged live
    intervals, updated as optional merges are made."""

    def __init__(self, alias: AliasAnalysis, live: LiveRanges, donated_params: set):
        self.alias = alias
        self.live = live
        self.intervals: dict[int, list[Interval]] = {}
        # root -> [holds read-only content, holds an entry parameter, size]
        self.info: dict[int, list] = {}
        df = alias.dataflow
        for value in df.values:
            root = alias.find(value)
            self.intervals.setdefault(root, []).append(live.range_of(value))
            readonly, _ = _readonly_and_writers([value], df, donated_params)
            is_param = value.instruction.opcode == "parameter" and \
                value.instruction.parent is df.entry
            info = self.info.setdefault(root, [False, False, 0])
            info[0] |= bool(readonly)
            info[1] |= is_param
            info[2] = max(info[2], value.size)
        for root in self.intervals:
            self.intervals[root] = merge_intervals(self.intervals[root])

    def merge(self, a: HloValue, b: HloValue) -> None:
        ra, rb = self.alias.find(a), self.alias.find(b)
        if ra == rb:
            return
        merged = merge_intervals(self.intervals.pop(ra) + self.intervals.pop(rb))
        ia, ib = self.info.pop(ra), self.info.pop(rb)
        root = self.alias.merge(a, b)
        self.intervals[root] = merged
        self.info[root] = [ia[0] or ib[0], ia[1] or ib[1], max(ia[2], ib[2])]

    def of(self, value: HloValue) -> list[Interval]:
        return self.intervals[self.alias.find(value)]


class BufferAssignment:
    """The result of `assign_buffers`: allocations and a slice for every
    array leaf of every instruction of every sequential computation."""

    def __init__(self, module: HloModule, schedule, dataflow: DataflowAnalysis,
                 alias: AliasAnalysis, live: LiveRanges, alignment: int):
        self.module = module
        self.schedule = schedule
        self.dataflow = dataflow
        self.alias = alias
        self.live_ranges = live
        self.alignment = alignment
        self.share_elementwise = True
        self.allocations: list[Allocation] = []
        self.temp_allocation: Allocation | None = None
        self.donations: list[InputOutputAlias] = []   # those honoured
        self.heap_order = ""
        # buffer root -> (allocation index, offset)
        self._placement: dict[int, tuple[int, int]] = {}
        self._buffer_size: dict[int, int] = {}
        # instruction id -> [(operand, operand index, output index, shared)]
        self._in_place: dict[int, list[tuple[int, ShapeIndex, ShapeIndex, bool]]] = {}

    # ------------------------------------------------------------- queries

    def has_slice(self, instruction: HloInstruction, shape_index: ShapeIndex = ()) -> bool:
        return self.dataflow.has_value(instruction, tuple(shape_index))

    def slice(self, instruction: HloInstruction, shape_index: ShapeIndex = ()) -> BufferSlice:
        """The bytes holding `instruction`'s array leaf `shape_index`."""
        index = tuple(shape_index)
        if not self.dataflow.has_value(instruction, index):
            if id(instruction) not in self.dataflow._at and \
                    (instruction.parent is None or
                     not self.dataflow.is_sequential(instruction.parent)):
                raise HloError(f"{where(instruction)}has no buffer: it is not in a "
                               "sequential computation (fusion bodies and reducers "
                               "have none)")
            raise HloError(f"{where(instruction)}has no buffer at shape index "
                           f"{index} of {instruction.shape} (tuples and tokens are "
                           "not materialized)")
        value = self.dataflow.value_at(instruction, index)
        root = self.alias.find(value)
        allocation, offset = self._placement[root]
        return BufferSlice(allocation, offset, value.size)

    def leaf_slices(self, instruction: HloInstruction) -> list[tuple[ShapeIndex, BufferSlice]]:
        return [(index, self.slice(instruction, index))
                for index, _ in self.dataflow.leaf_values(instruction)]

    def output_slices(self) -> list[tuple[ShapeIndex, BufferSlice]]:
        """The entry result's leaves in order (a tuple result gives its
        leaves) and where they are."""
        return self.leaf_slices(self.module.entry.root)

    def parameter_slice(self, number: int, index: ShapeIndex = ()) -> BufferSlice:
        return self.slice(self.module.entry.parameter(number), index)

    def in_place_operands(self, instruction: HloInstruction) -> list[tuple[int, ShapeIndex, ShapeIndex, bool]]:
        """[(operand number, operand index, output index, shared)] of an
        instruction that writes outputs over operands (in-place
        dynamic-update-slice and scatter fusions, custom calls with
        output_to_operand_aliasing). When `shared` is False the output has
        its own buffer and the operand must be copied into it first."""
        return list(self._in_place.get(id(instruction), []))

    def same_buffer(self, a: HloInstruction, a_index: ShapeIndex,
                    b: HloInstruction, b_index: ShapeIndex = ()) -> bool:
        va = self.dataflow.value_at(a, tuple(a_index))
        vb = self.dataflow.value_at(b, tuple(b_index))
        return self.alias.same_buffer(va, vb)

    def allocation(self, index: int) -> Allocation:
        return self.allocations[index]

    def memory_analysis(self) -> MemoryAnalysis:
        """The allocations' sizes in jax's fields (generated code left 0)."""
        argument = output = alias = temp = constant = host_temp = 0
        for a in self.allocations:
            if a.memory_space == HOST_MEMORY_SPACE:
                host_temp += a.size
                continue
            if a.kind == "parameter":
                argument += a.size
                if a.output_index is not None:
                    alias += a.size
            if a.output_index is not None:
                output += a.size
            if a.kind == "temp":
                temp += a.size
            if a.kind == "constant":
                constant += a.size
        return MemoryAnalysis(
            temp_size_in_bytes=temp, argument_size_in_bytes=argument,
            output_size_in_bytes=output, alias_size_in_bytes=alias,
            constant_size_in_bytes=constant, host_temp_size_in_bytes=host_temp,
            peak_memory_in_bytes=argument + output + temp - alias)

    # --------------------------------------------------------------- dumps

    def to_text(self) -> str:
        """A dump in the manner of XLA's buffer-assignment.txt."""
        values_by_alloc: dict[int, list[HloValue]] = {}
        for value in self.dataflow.values:
            allocation, _ = self._placement[self.alias.find(value)]
            values_by_alloc.setdefault(allocation, []).append(value)
        lines = ["BufferAssignment:"]
        for a in self.allocations:
            desc = [f"allocation {a.index}: size {a.size}"]
            if a.kind == "parameter":
                desc.append(f"parameter {a.parameter}, shape index "
                            f"{{{','.join(map(str, a.parameter_index))}}}")
            elif a.kind == "constant":
                desc.append(f"constant {a.constant}")
            elif a.kind == "temp":
                desc.append("preallocated-temp")
            elif a.kind == "output":
                desc.append("output")
            if a.memory_space:
                desc.append(f"color {a.memory_space} (host memory)")
            if a.output_index is not None:
                desc.append(f"maybe-live-out at output {{{','.join(map(str, a.output_index))}}}")
            lines.append(", ".join(desc) + ":")
            for value in sorted(values_by_alloc.get(a.index, []),
                                key=lambda v: (self._offset(v), v.id)):
                iv = self.live_ranges.range_of(value)
                lines.append(f" value: <{value.id} {value.name()}"
                             f"{' phi' if value.is_phi else ''}> (size={value.size},"
                             f"offset={self._offset(value)}): {value.shape} "
                             f"live {iv.start}-{iv.end}")
        lines.append("")
        total = sum(a.size for a in self.allocations)
        lines.append(f"Total bytes used: {total}")
        ma = self.memory_analysis()
        lines.append(f"Memory analysis: temp {ma.temp_size_in_bytes}, arguments "
                     f"{ma.argument_size_in_bytes}, outputs {ma.output_size_in_bytes}, "
                     f"alias {ma.alias_size_in_bytes} (heap order: {self.heap_order or '-'})")
        lines.append("")
        lines.append("Used values:")
        for value in self.dataflow.values:
            lines.append(f"<{value.id} {value.name()}{' phi' if value.is_phi else ''}>")
            lines.append(" positions:")
            for inst, index in value.positions:
                lines.append(f"  {inst.name}{{{','.join(map(str, index))}}}")
            lines.append(" uses:")
            for use in value.uses:
                lines.append(f"  {use.instruction.name}, operand {use.operand_number}"
                             f" {{{','.join(map(str, use.operand_index))}}}")
        lines.append("")
        lines.append(f"HloLiveRange (max {self.live_ranges.end_time}):")
        lines.append("  InstructionSequence:")
        for t, inst in enumerate(self.live_ranges.flattened):
            lines.append(f"    {t}:{inst.name}")
        lines.append("  BufferLiveRange:")
        for value in self.dataflow.values:
            iv = self.live_ranges.range_of(value)
            lines.append(f"    {value.name()}:{iv.start}-{iv.end}")
        return "\n".join(lines) + "\n"

    def _intervals(self, root: int) -> list[Interval]:
        return merge_intervals([self.live_ranges.range_of(v)
                                for v in self.alias.buffer_values(self.dataflow.values[root])])

    def _offset(self, value: HloValue) -> int:
        return self._placement[self.alias.find(value)][1]

    def check(self) -> None:
        """Brute force: no two buffers that are live at the same time hold
        overlapping bytes. Raises AssertionError naming both."""
        roots = {}
        for value in self.dataflow.values:
            r = self.alias.find(value)
            roots.setdefault(r, []).append(value)
        items = []
        for r, values in roots.items():
            allocation, offset = self._placement[r]
            size = max(v.size for v in values)
            items.append((allocation, offset, size, r, values[0]))
        for i in range(len(items)):
            ai, oi, si, ri, vi = items[i]
            for j in range(i + 1, len(items)):
                aj, oj, sj, rj, vj = items[j]
                if ai != aj or si == 0 or sj == 0 or oi + si <= oj or oj + sj <= oi:
                    continue
                if _interferes(self, ri, rj):
                    raise AssertionError(
                        f"buffers of {vi.name()} and {vj.name()} overlap in allocation "
                        f"{ai} ([{oi}, {oi + si}) and [{oj}, {oj + sj})) while both live")


# ----------------------------------------------------------------- checks

def _check_while(inst: HloInstruction, df: DataflowAnalysis, live: LiveRanges,
                 alias: AliasAnalysis, donated: set) -> None:
    callees = dict(sequential_callees(inst))
    body = callees["body"]
    param = body.parameters[0]
    init = inst.operands[0]
    body_start = live.computation_span(body)[0]
    leaves = [index for index, _ in array_leaves(inst.shape)]
    written = {}
    for index in leaves:
        root_value = df.value_at(body.root, index)
        p = df.value_at(param, index)
        if root_value is p:
            written[index] = False
            continue
        if root_value.instruction is param:
            raise _copy_needed(body.root, f"loop state element {index} of while "
                               f"'{inst.name}' takes element {root_value.index} of "
                               "the previous iteration (two elements would share one "
                               "buffer)")
        written[index] = True
        # The new state is written while the old one may still be read.
        writer = root_value.instruction
        t = live.instruction_time(writer)
        p_end = live.range_of(p).end
        if p_end > t or (p_end == t and not _shares_legally(writer, p, df, alias)):
            last = _last_reader(p, live)
            raise _copy_needed(writer, f"it writes loop state element {index} of "
                               f"while '{inst.name}' while the previous value is still "
                               f"read{' by ' + repr(last.name) if last else ''}")
        i_value = df.value_at(init, index)
        source = i_value.instruction
        if source.opcode == "constant" or (source.opcode == "parameter" and
                                           source.parent is df.entry and
                                           (source.parameter_number, i_value.index)
                                           not in donated):
            kind = "constant" if source.opcode == "constant" else "parameter (not donated)"
            raise _copy_needed(inst, f"the loop would write element {index} of its state "
                               f"into the buffer of {kind} '{source.name}'")
        if live.range_of(i_value).end > body_start:
            last = _last_reader(i_value, live, exclude=inst)
            raise _copy_needed(inst, f"the loop overwrites its initial value at "
                               f"element {index} ({i_value.name()}), which is still "
                               f"needed after the loop starts"
                               f"{' by ' + repr(last.name) if last else ''}")
    # Two elements of the state in one buffer.
    by_buffer: dict[int, list[ShapeIndex]] = {}
    for index in leaves:
        by_buffer.setdefault(alias.find(df.value_at(inst, index)), []).append(index)
    for indices in by_buffer.values():
        if len(indices) < 2:
            continue
        inits = {df.value_at(init, i).id for i in indices}
        if any(written[i] for i in indices) or len(inits) > 1:
            raise _copy_needed(inst, f"loop state elements {indices} of while "
                               f"'{inst.name}' would share one buffer")


def _check_conditional(inst: HloInstruction, df: DataflowAnalysis, live: LiveRanges,
                       alias: AliasAnalysis) -> None:
    branches = [c for _, c in sequential_callees(inst)]
    t = live.instruction_time(inst)
    leaves = [index for index, _ in array_leaves(inst.shape)]
    sources: dict[ShapeIndex, set[int]] = {}
    for index in leaves:
        roots = [df.value_at(b.root, index) for b in branches]
        forwarded = [v for v, b in zip(roots, branches) if v.instruction.parent is not b]
        sources[index] = {v.id for v in roots}
        if not forwarded:
            continue
        if len({v.id for v in forwarded}) > 1:
            raise _copy_needed(inst, f"its branches return different operands at "
                               f"element {index}, which would share one buffer")
        if len({v.id for v in roots}) > 1:
            operand_value = forwarded[0]
            if live.range_of(operand_value).end > t:
                raise _copy_needed(inst, f"a branch returns its operand "
                                   f"{operand_value.name()} at element {index} while "
                                   "another branch writes that element, and the operand "
                                   "is still needed after the conditional")
    by_buffer: dict[int, list[ShapeIndex]] = {}
    for index in leaves:
        by_buffer.setdefault(alias.find(df.value_at(inst, index)), []).append(index)
    for indices in by_buffer.values():
        if len(indices) > 1 and len(set().union(*(sources[i] for i in indices))) > 1:
            raise _copy_needed(inst, f"result elements {indices} of conditional "
                               f"'{inst.name}' would share one buffer")


def _last_reader(value: HloValue, live: LiveRanges,
                 exclude: HloInstruction | None = None) -> HloInstruction | None:
    best = None
    for use in value.uses:
        if use.instruction is exclude:
            continue
        if best is None or live.instruction_time(use.instruction) > \
                live.instruction_time(best):
            best = use.instruction
    return best


def _share_slots(inst: HloInstruction, elementwise: bool = True
                 ) -> dict[int, list[tuple[ShapeIndex, ShapeIndex]]]:
    """operand number -> [(operand index, output index)] that `inst` may
    write over (in place, or also elementwise)."""
    slots: dict[int, list[tuple[ShapeIndex, ShapeIndex]]] = {}
    pairs = in_place_pairs(inst) + (elementwise_share_pairs(inst) if elementwise else [])
    for k, operand_index, output_index in pairs:
        slots.setdefault(k, []).append((operand_index, output_index))
    return slots


def _shares_legally(writer: HloInstruction, operand_value: HloValue,
                    df: DataflowAnalysis, alias: AliasAnalysis,
                    allowed_slots: dict | None = None) -> bool:
    """`writer` reads `operand_value`'s buffer only through operands it may
    write over (so its output may take that buffer)."""
    slots = _share_slots(writer) if allowed_slots is None else allowed_slots
    return _reads_only_where_it_writes(writer, alias.find(operand_value), df, alias, slots)


def _reads_only_where_it_writes(writer: HloInstruction, buffer: int, df: DataflowAnalysis,
                                alias: AliasAnalysis, slots: dict,
                                outputs: list[ShapeIndex] | None = None) -> bool:
    """Whether `writer` reads `buffer` (an alias-analysis buffer), and only
    at operand leaves that `slots` (see _share_slots) lets it write over,
    into one of `outputs` when given."""
    reads = False
    for k, operand in enumerate(writer.operands):
        for index, value in df.leaf_values(operand):
            if alias.find(value) != buffer:
                continue
            reads = True
            if not any(oi == index and (outputs is None or out in outputs)
                       for oi, out in slots.get(k, ())):
                return False
    return reads


def _readonly_and_writers(values: list[HloValue], df: DataflowAnalysis,
                          donated_params: set) -> tuple[list[HloValue], list[HloValue]]:
    readonly, writers = [], []
    entry = df.entry
    for v in values:
        inst = v.instruction
        if inst.opcode == "constant":
            readonly.append(v)
        elif inst.opcode == "parameter" and inst.parent is entry:
            if (inst.parameter_number, v.index) not in donated_params:
                readonly.append(v)
        elif not v.is_phi:
            writers.append(v)
    return readonly, writers


# ------------------------------------------------------------------ assign

def _can_merge(first: HloValue, second_writer: HloInstruction, second: HloValue,
               buffers: _BufferSet, df: DataflowAnalysis, alias: AliasAnalysis,
               live: LiveRanges, slots: dict, donated_params: set,
               live_out: set) -> bool:
    """May `first`'s buffer (dead once `second_writer` reads it) take
    `second`'s buffer, written by `second_writer`?"""
    ra, rb = alias.find(first), alias.find(second)
    if ra == rb:
        return False
    if ra in live_out and rb in live_out:
        return False
    readonly_a, param_a, size_a = buffers.info[ra]
    readonly_b, param_b, size_b = buffers.info[rb]
    if readonly_a or readonly_b or (param_a and param_b) or size_a != size_b:
        return False
    t = live.instruction_time(second_writer)
    touch = False
    for x in buffers.of(first):
        for y in buffers.of(second):
            if not x.overlaps(y):
                continue
            # They may only touch where the writer reads the old content
            # and writes the new one.
            if not (x.end == t and y.start == t):
                return False
            touch = True
    # Apart (a donated parameter whose last reader runs before the output's
    # writer, say a copy that copy insertion placed after them): nothing to
    # overwrite while it is read.
    return not touch or _shares_legally(second_writer, first, df, alias, slots)


def assign_buffers(module: HloModule, schedule, *, alignment: int = DEFAULT_ALIGNMENT,
                   share_elementwise: bool = True,
                   dataflow: DataflowAnalysis | None = None) -> BufferAssignment:
    """Allocations and slices for every array of `module` as `schedule`
    orders it. `share_elementwise` lets an elementwise instruction or loop
    fusion write its output over an operand that dies there and that it
    reads only at the element it writes (XLA's CanShareBuffer): the kernel
    then gets the same address as input and output. `dataflow`: the
    module's analysis when the caller has it and the module has not changed
    since (the schedule's, `schedule.dataflow`); it is rebuilt otherwise."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, got {alignment}")
    df = dataflow if _reusable(dataflow, module) else DataflowAnalysis(module)
    alias = AliasAnalysis(df)
    _check_schedule(df, schedule)
    donations = parse_input_output_alias(module)
    params = {p.parameter_number: p for p in df.entry.parameters}
    _check_donations(module, df, donations, params)
    donated_params = {(d.parameter, tuple(d.parameter_index)) for d in donations}
    live = LiveRanges(df, schedule, donations)

    # Values that must share must not overwrite what is still needed.
    for comp in df.computations:
        for inst in schedule.sequence(comp):
            if inst.opcode == "while":
                _check_while(inst, df, live, alias, donated_params)
            elif inst.opcode == "conditional":
                _check_conditional(inst, df, live, alias)

    ba = BufferAssignment(module, schedule, df, alias, live, alignment)
    ba.share_elementwise = share_elementwise
    buffers = _BufferSet(alias, live, donated_params)
    _merge_donations(ba, buffers, donations, params, donated_params)
    _merge_in_place_writers(ba, buffers, donated_params)
    groups = _read_only_buffers_checked(df, alias, donated_params)
    _allocate(ba, groups, buffers, params, donated_params)
    return ba


def _reusable(dataflow: DataflowAnalysis | None, module: HloModule) -> bool:
    """Whether `dataflow` is the analysis buffer assignment would build:
    of this module, and without computations shared by several calls (a
    scheduling analysis allows those; here they are an error, raised by
    the analysis built anew)."""
    return dataflow is not None and dataflow.module is module and not dataflow._shared


def _check_schedule(df: DataflowAnalysis, schedule) -> None:
    """Every analysed computation has a sequence of exactly its
    instructions, each after its operands and control predecessors."""
    for comp in df.computations:
        try:
            seq = schedule.sequence(comp)
        except KeyError:
            raise HloError(f"computation '{comp.name}' has no schedule (schedule the "
                           "module with schedule_module first)") from None
        if {id(i) for i in seq} != {id(i) for i in comp.instructions} or \
                len(seq) != len(comp.instructions):
            raise HloError(f"the schedule of computation '{comp.name}' does not hold "
                           "exactly its instructions (was the module changed after "
                           "scheduling?)")
        position = {id(i): k for k, i in enumerate(seq)}
        by_name = {i.name: i for i in seq}
        for inst in seq:
            preds = list(inst.operands) + [by_name[n] for n in
                                           inst.attrs.get(CONTROL_PREDECESSORS) or ()
                                           if n in by_name]
            for p in preds:
                if position[id(p)] >= position[id(inst)]:
                    raise HloError(f"{where(inst)}is scheduled before '{p.name}', "
                                   "which it depends on")


def _check_donations(module: HloModule, df: DataflowAnalysis,
                     donations: list[InputOutputAlias], params: dict) -> None:
    """input_output_alias names array leaves of ENTRY's parameters and
    result."""
    for d in donations:
        if d.parameter not in params:
            raise HloError(f"module '{module.name}': input_output_alias names "
                           f"parameter {d.parameter}, which ENTRY does not have")
        if not df.has_value(params[d.parameter], d.parameter_index) or \
                not df.has_value(df.entry.root, d.output_index):
            raise HloError(f"module '{module.name}': input_output_alias "
                           f"{d.output_index} -> ({d.parameter}, {d.parameter_index}) "
                           "does not name array leaves of the parameter and the result")


def _live_out_buffers(ba: BufferAssignment) -> set[int]:
    """The buffers of the ENTRY result's leaves."""
    return {ba.alias.find(v) for _, v in ba.dataflow.leaf_values(ba.dataflow.entry.root)}


def _merge_donations(ba: BufferAssignment, buffers: "_BufferSet",
                     donations: list[InputOutputAlias], params: dict,
                     donated_params: set) -> None:
    """Donated parameters take their output's buffer when nothing reads the
    parameter after the output is written (recorded in `ba.donations`); a
    must-alias donation that cannot is an error."""
    df, alias, live = ba.dataflow, ba.alias, ba.live_ranges
    for d in donations:
        p_value = df.value_at(params[d.parameter], d.parameter_index)
        out_value = df.value_at(df.entry.root, d.output_index)
        writers = [v for v in alias.buffer_values(out_value) if not v.is_phi and
                   v.instruction.opcode not in ("parameter", "constant")]
        ok = False
        if alias.same_buffer(p_value, out_value):
            ok = True
        elif writers:
            writer = min(writers, key=lambda v: live.range_of(v).start).instruction
            others = _live_out_buffers(ba) - {alias.find(out_value)}
            ok = _can_merge(p_value, writer, out_value, buffers, df, alias, live,
                            _share_slots(writer), donated_params, others)
            if ok:
                buffers.merge(p_value, out_value)
        if ok:
            ba.donations.append(d)
        elif d.must_alias:
            raise HloError(f"module '{ba.module.name}': output {d.output_index} must alias "
                           f"parameter {d.parameter} {d.parameter_index}, but the "
                           "parameter is still read after the output is written")


def _merge_in_place_writers(ba: BufferAssignment, buffers: "_BufferSet",
                            donated_params: set) -> None:
    """In-place writers (and, with share_elementwise, elementwise reuse)
    take their operand's buffer where the schedule allows, in program
    order; the in-place ones are recorded for `in_place_operands`."""
    df, alias, live = ba.dataflow, ba.alias, ba.live_ranges
    # The result's buffers change only with a merge: worked out again after
    # one, not for every candidate pair (a training step has hundreds of
    # both).
    live_out: set | None = None
    for inst in live.flattened:
        candidates = [(k, oi, out, True) for k, oi, out in in_place_pairs(inst)]
        if ba.share_elementwise:
            candidates += [(k, oi, out, False) for k, oi, out in elementwise_share_pairs(inst)]
        if not candidates:
            continue
        slots = _share_slots(inst, ba.share_elementwise)
        records = []
        for k, operand_index, output_index, in_place in candidates:
            if not df.has_value(inst.operands[k], operand_index) or \
                    not df.has_value(inst, output_index):
                continue
            operand_value = df.value_at(inst.operands[k], operand_index)
            out_value = df.value_at(inst, output_index)
            shared = alias.same_buffer(operand_value, out_value)
            if not shared:
                if live_out is None:
                    live_out = _live_out_buffers(ba)
                if _can_merge(operand_value, inst, out_value, buffers, df, alias, live,
                              slots, donated_params, live_out):
                    buffers.merge(operand_value, out_value)
                    live_out = None
                    shared = True
            if in_place:
                records.append((k, operand_index, output_index, shared))
        if records:
            ba._in_place[id(inst)] = records


def _read_only_buffers_checked(df: DataflowAnalysis, alias: AliasAnalysis,
                               donated_params: set) -> dict[int, list[HloValue]]:
    """The values of each buffer (by alias root), after checking that
    nothing writes over a read-only parameter or a constant."""
    groups: dict[int, list[HloValue]] = {}
    for value in df.values:
        groups.setdefault(alias.find(value), []).append(value)
    for values in groups.values():
        readonly, writers = _readonly_and_writers(values, df, donated_params)
        if readonly and (writers or len(readonly) > 1):
            culprit = (writers or readonly[1:])[0]
            what = readonly[0]
            kind = "constant" if what.instruction.opcode == "constant" else \
                "parameter (not donated)"
            raise _copy_needed(culprit.instruction,
                               f"it would write into the buffer of {kind} "
                               f"'{what.instruction.name}'")
    return groups


def _touch_is_sharing(ba: BufferAssignment, t: int, ending: int, starting: int) -> bool:
    """Buffer `ending` is last read at time t where buffer `starting` is
    first written: fine when the instruction at t writes `starting` over
    `ending` legally (reads it only at operands it may write over)."""
    df, alias = ba.dataflow, ba.alias
    if t >= len(ba.live_ranges.flattened):
        return False
    writer = ba.live_ranges.flattened[t]
    written = [index for index, v in df.leaf_values(writer)
               if v.instruction is writer and alias.find(v) == starting]
    if not written:
        return False
    slots = _share_slots(writer, ba.share_elementwise)
    return _reads_only_where_it_writes(writer, ending, df, alias, slots, written)


def _interferes(ba: BufferAssignment, a: int, b: int, buffers: "_BufferSet | None" = None) -> bool:
    """Are buffers (union-find roots) a and b live at the same time, other
    than where one legally writes over the other?"""
    ia = buffers.intervals[a] if buffers is not None else ba._intervals(a)
    ib = buffers.intervals[b] if buffers is not None else ba._intervals(b)
    for x in ia:
        for y in ib:
            if not x.overlaps(y):
                continue
            if x.end == y.start and x.start < y.start and _touch_is_sharing(ba, y.start, a, b):
                continue
            if y.end == x.start and y.start < x.start and _touch_is_sharing(ba, x.start, b, a):
                continue
            return True
    return False


class _Occupancy:
    """The live intervals of the buffers placed at offset 0 of one
    allocation. They never overlap (only touch), so sorted by start their
    ends are sorted too, and the ones meeting an interval are found by
    bisection."""

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.roots: list[int] = []

    def add(self, root: int, intervals: list[Interval]) -> None:
        for iv in intervals:
            k = bisect.bisect_left(self.starts, iv.start)
            self.starts.insert(k, iv.start)
            self.ends.insert(k, iv.end)
            self.roots.insert(k, root)

    def touching(self, intervals: list[Interval]) -> list[int] | None:
        """The buffers placed here whose intervals meet `intervals`, when
        each such meeting is one buffer's last use at the other's first
        write (`_interferes` asks whether that is a legal sharing); None
        when some overlap more than that (they interfere, whatever the
        instruction there does)."""
        starts, ends, roots = self.starts, self.ends, self.roots
        out: list[int] = []
        for iv in intervals:
            start, end = iv.start, iv.end
            k = bisect.bisect_left(ends, start)
            while k < len(starts) and starts[k] <= end:
                s, e = starts[k], ends[k]
                if not ((e == start and s < start) or (end == s and start < s)):
                    return None
                if roots[k] not in out:
                    out.append(roots[k])
                k += 1
        return out


def _allocate(ba: BufferAssignment, groups: dict[int, list[HloValue]],
              buffers: _BufferSet, params: dict, donated_params: set) -> None:
    """Places every buffer (by alias root): parameters, outputs and
    constants in allocations of their own, temporaries in a free output or
    donated-parameter allocation where one fits, the rest packed into one
    temp allocation."""
    size_of = {root: max(v.size for v in values) for root, values in groups.items()}
    for root, size in size_of.items():
        if size > INT64_MAX:
            raise ResourceError(f"a buffer of {size} bytes does not fit in int64")
    allocations = _fixed_allocations(ba, groups, size_of, params)
    temps = [root for root in groups if root not in ba._placement]
    # Values offloaded to host memory: a host allocation of their own.
    host = [root for root in temps if _in_host_memory(groups[root])]
    if host:
        offloaded = set(host)
        temps = [root for root in temps if root not in offloaded]
    reused = _place_in_output_allocations(ba, buffers, groups, size_of, allocations, temps,
                                          donated_params)
    temps = [root for root in temps if root not in reused]
    if temps:
        allocations.append(_pack_temporaries(ba, buffers, size_of, allocations, temps))
    if host:
        allocations.append(_pack_temporaries(ba, buffers, size_of, allocations, host,
                                             HOST_MEMORY_SPACE))
    ba.allocations = allocations


def _in_host_memory(values: list[HloValue]) -> bool:
    """Whether a buffer's values all live in host memory (memory space 5:
    a program's offloaded values)."""
    return all(v.shape.memory_space == HOST_MEMORY_SPACE for v in values)


def _fixed_allocations(ba: BufferAssignment, groups: dict[int, list[HloValue]],
                       size_of: dict[int, int], params: dict) -> list[Allocation]:
    """An allocation for each ENTRY parameter leaf, each output leaf that is
    not a parameter (a constant's own when it is one), and each other
    constant; their buffers placed at offset 0."""
    df, alias, entry = ba.dataflow, ba.alias, ba.dataflow.entry
    output_of: dict[int, ShapeIndex] = {}
    for index, value in df.leaf_values(entry.root):
        output_of.setdefault(alias.find(value), index)
    allocations: list[Allocation] = []

    def add(root: int, **kw) -> None:
        allocations.append(Allocation(index=len(allocations), size=size_of[root],
                                      alignment=ba.alignment,
                                      output_index=output_of.get(root), **kw))
        ba._placement[root] = (len(allocations) - 1, 0)

    for number in sorted(params):
        for index, value in df.leaf_values(params[number]):
            root = alias.find(value)
            if root in ba._placement:
                raise HloError(f"{where(params[number])}its leaf {index} shares a buffer "
                               "with another parameter")
            add(root, kind="parameter", parameter=number, parameter_index=index)
    for index, value in df.leaf_values(entry.root):
        root = alias.find(value)
        if root not in ba._placement:
            constants = [v for v in groups[root] if v.instruction.opcode == "constant"]
            if constants:
                add(root, kind="constant", constant=constants[0].instruction.name)
            else:
                add(root, kind="output")
    for comp in df.computations:
        for inst in ba.schedule.sequence(comp):
            if inst.opcode != "constant":
                continue
            for _, value in df.leaf_values(inst):
                root = alias.find(value)
                if root not in ba._placement:
                    add(root, kind="constant", constant=inst.name)
    fixed = sum(a.size for a in allocations)
    if fixed > INT64_MAX:
        raise ResourceError(f"module '{ba.module.name}': its parameters, outputs and "
                            f"constants take {fixed} bytes, more than int64 can address")
    return allocations


def _place_in_output_allocations(ba: BufferAssignment, buffers: _BufferSet,
                                 groups: dict[int, list[HloValue]], size_of: dict[int, int],
                                 allocations: list[Allocation], temps: list[int],
                                 donated_params: set) -> set[int]:
    """As XLA's BufferAssigner: a temporary may live in a (writable) output
    or donated-parameter allocation, at offset 0, when nothing placed there
    is live at the same time: first those of its operands, then the
    smallest that fits. Returns the temporaries placed so."""
    df, alias = ba.dataflow, ba.alias
    reusable = {a.index for a in allocations
                if a.kind == "output" or
                (a.kind == "parameter" and (a.parameter, a.parameter_index) in donated_params)}
    occupants: dict[int, _Occupancy] = {a: _Occupancy() for a in reusable}
    for root, (allocation, _) in ba._placement.items():
        if allocation in reusable:
            occupants[allocation].add(root, buffers.intervals[root])
    reused = set()
    # The reusable allocations, the smallest first (sizes do not change
    # here): sorted once, not once per temporary; those too small for a
    # temporary are skipped by bisection.
    smallest_first = sorted(reusable, key=lambda a: (allocations[a].size, a))
    sizes = [allocations[a].size for a in smallest_first]
    for root in sorted(temps, key=lambda r: (-size_of[r], min(v.id for v in groups[r]))):
        size = size_of[root]
        candidates = []
        for value in groups[root]:
            for operand in value.instruction.operands:
                for _, operand_value in df.leaf_values(operand):
                    where_, _ = ba._placement.get(alias.find(operand_value), (None, 0))
                    if where_ in reusable and where_ not in candidates and \
                            size <= allocations[where_].size:
                        candidates.append(where_)
        # Then any of them, the smallest first.
        first = set(candidates)
        candidates += [a for a in smallest_first[bisect.bisect_left(sizes, size):]
                       if a not in first]
        mine = buffers.intervals[root]
        for allocation in candidates:
            touching = occupants[allocation].touching(mine)
            if touching is not None and \
                    not any(_interferes(ba, root, other, buffers) for other in touching):
                ba._placement[root] = (allocation, 0)
                occupants[allocation].add(root, mine)
                reused.add(root)
                break
    return reused


def _pack_temporaries(ba: BufferAssignment, buffers: _BufferSet, size_of: dict[int, int],
                      allocations: list[Allocation], temps: list[int],
                      memory_space: int = 0) -> Allocation:
    """The temp allocation: `temps` packed by the heap simulator (in host
    memory for memory space 5)."""
    items = [HeapItem(root, size_of[root], buffers.intervals[root]) for root in temps]
    result = pack(items, ba.alignment)
    heap_size = result.size
    total = sum(a.size for a in allocations) + heap_size
    if total > INT64_MAX:
        raise ResourceError(f"module '{ba.module.name}' needs {total} bytes, more "
                            "than int64 can address")
    temp = Allocation(index=len(allocations), size=heap_size, kind="temp",
                      alignment=ba.alignment, memory_space=memory_space)
    if not memory_space:   # (the device's temp allocation; the host's is found by its space)
        ba.temp_allocation = temp
        ba.heap_order = result.order
    for root in temps:
        ba._placement[root] = (temp.index, result.offsets[root])
    return temp

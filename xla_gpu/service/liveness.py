"""Live ranges of values over the module's flattened schedule (XLA's
HloLiveRange, module scoped).

The flattened schedule numbers every instruction of every sequential
computation: an instruction that runs other computations comes after
them (a while after its condition then its body, a conditional after its
branches, a call after its callee), so a value that lives across a loop
covers the whole body. Each computation spans [start, end).

A value lives from its definition (a parameter: from its computation's
start, wherever the schedule lists it) to its last use or position; a
position at a computation's root lives to that computation's end; a
while's init operand is read when the body starts; read-only entry
parameters (not donated) and entry outputs live to the end of the
program.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hlo.module import HloComputation, HloInstruction
from .alias_analysis import InputOutputAlias
from .dataflow import DataflowAnalysis, HloValue, sequential_callees

__all__ = ["LiveRanges", "Interval"]


@dataclass(frozen=True)
class Interval:
    start: int
    end: int        # inclusive

    def overlaps(self, other: "Interval") -> bool:
        return self.start <= other.end and other.start <= self.end


class LiveRanges:
    """`time[inst]` in the flattened schedule, `span[comp]` = (start, end),
    `ranges[value.id]` = Interval."""

    def __init__(self, dataflow: DataflowAnalysis, schedule,
                 donated: list[InputOutputAlias] = ()):
        self.dataflow = dataflow
        self.flattened: list[HloInstruction] = []
        self.time: dict[int, int] = {}
        self.span: dict[int, tuple[int, int]] = {}
        self._flatten(schedule)
        self.end_time = len(self.flattened)
        donated_leaves = {(a.parameter, tuple(a.parameter_index)) for a in donated}
        self.ranges: dict[int, Interval] = {}
        for value in dataflow.values:
            self.ranges[value.id] = self._range(value, donated_leaves)

    def _flatten(self, schedule) -> None:
        entry = self.dataflow.entry
        # Frames of (computation, sequence, next position, start time).
        stack = [[entry, schedule.sequence(entry), 0, 0]]
        expanded: set[int] = set()
        while stack:
            frame = stack[-1]
            if frame[3] is None:
                frame[3] = len(self.flattened)
            comp, seq, k, start = frame
            if k == len(seq):
                self.span[id(comp)] = (start, len(self.flattened))
                stack.pop()
                continue
            inst = seq[k]
            callees = sequential_callees(inst)
            if callees and id(inst) not in expanded:
                expanded.add(id(inst))
                # Push in reverse so the first callee (a while's condition)
                # is flattened first.
                for _, callee in reversed(callees):
                    stack.append([callee, schedule.sequence(callee), 0, None])
                continue
            frame[2] = k + 1
            self.time[id(inst)] = len(self.flattened)
            self.flattened.append(inst)

    def instruction_time(self, inst: HloInstruction) -> int:
        return self.time[id(inst)]

    def computation_span(self, comp: HloComputation) -> tuple[int, int]:
        return self.span[id(comp)]

    def _position_time(self, inst: HloInstruction) -> int:
        comp = inst.parent
        if inst is comp.root:
            return self.span[id(comp)][1]
        return self.time[id(inst)]

    def _range(self, value: HloValue, donated_leaves: set) -> Interval:
        inst = value.instruction
        comp = inst.parent
        start_comp, end_comp = self.span[id(comp)]
        if inst.opcode == "parameter":
            start = start_comp
        else:
            start = self.time[id(inst)]
        if inst is comp.root:
            end = self._position_time(inst)
        else:
            # A parameter reads nothing where the schedule lists it: its
            # value is there from the start, and a parameter nobody reads
            # is dead from the start (a loop body may write the state
            # element it holds before the schedule reaches the parameter).
            end = start if inst.opcode == "parameter" else self.time[id(inst)]
        for position, _ in value.positions[1:]:
            end = max(end, self._position_time(position))
        for use in value.uses:
            user = use.instruction
            if user.opcode == "while":
                # The init operand is read as the body starts (its buffer is
                # the loop's: only its content matters until then).
                body = dict(sequential_callees(user))["body"]
                t = self.span[id(body)][0]
            else:
                t = self.time[id(user)]
            end = max(end, t)
        if comp is self.dataflow.entry and inst.opcode == "parameter" and \
                (inst.parameter_number, value.index) not in donated_leaves:
            end = self.end_time
        return Interval(start, max(start, end))

    def range_of(self, value: HloValue) -> Interval:
        return self.ranges[value.id]

"""What scheduling and rematerialization share: the memory model of one
sequential computation (the buffers each instruction writes and holds,
their sizes, the orders the schedulers give and the peak an order has)
and the Schedule they produce. `schedule` builds schedules from it and
`rematerialization` lowers a schedule's peak with it; both are above it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..errors import HloError
from ..hlo.module import HloComputation, HloInstruction, HloModule
from .alias_analysis import AliasAnalysis, elementwise_share_pairs, in_place_pairs
from .dataflow import DataflowAnalysis, sequential_callees, topological_order, where

__all__ = ["ComputationMemoryModel", "Schedule"]


def _control_predecessors(inst: HloInstruction,
                          by_name: dict[str, HloInstruction]) -> list[HloInstruction]:
    out = []
    for name in inst.attrs.get("control-predecessors") or ():
        pred = by_name.get(name)
        if pred is None:
            raise HloError(f"{where(inst)}control predecessor '{name}' is not in "
                           f"computation '{inst.parent.name}'")
        out.append(pred)
    return out


def _device_bytes(value) -> int:
    """The device memory a value takes: none for one offloaded to host
    memory (memory space 5). So the schedulers, minimizing the device
    peak, move a value to the host as soon as it is made and bring it back
    only when it is read (the offload's point)."""
    return 0 if value.shape.memory_space else value.size


class ComputationMemoryModel:
    """What the schedulers of one computation need: for each instruction
    the buffers it writes (`defines`) and holds (its operands' buffers),
    buffer sizes, buffers live out (root) or live in (parameters), and the
    extra peak of the computations it runs."""

    def __init__(self, comp: HloComputation, dataflow: DataflowAnalysis,
                 alias: AliasAnalysis, callee_peaks: dict[int, int]):
        self.comp = comp
        self.instructions = topological_order(comp)
        self.index = {id(inst): k for k, inst in enumerate(self.instructions)}
        by_name = {i.name: i for i in self.instructions}
        n = len(self.instructions)
        self.preds: list[list[int]] = []
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for k, inst in enumerate(self.instructions):
            preds = []
            for p in list(inst.operands) + _control_predecessors(inst, by_name):
                j = self.index.get(id(p))
                if j is None:
                    raise HloError(f"{where(inst)}operand '{p.name}' is not in "
                                   f"computation '{comp.name}'")
                if j not in preds:
                    preds.append(j)
            self.preds.append(preds)
            for j in preds:
                self.succs[j].append(k)
        self.size: dict[int, int] = {}
        self.defines: list[list[int]] = []
        self.holds: list[list[int]] = []
        self.transient: list[int] = []
        self.shares: list[list[tuple[int, int]]] = []
        self.live_in: set[int] = set()
        for inst in self.instructions:
            defined = []
            for value in dataflow.defined_values(inst):
                b = alias.find(value)
                self.size[b] = max(self.size.get(b, 0), _device_bytes(value))
                if b not in defined:
                    defined.append(b)
            if inst.opcode == "parameter":
                self.live_in.update(defined)
            held = []
            for operand in inst.operands:
                for _, value in dataflow.leaf_values(operand):
                    b = alias.find(value)
                    self.size[b] = max(self.size.get(b, 0), _device_bytes(value))
                    if b not in held:
                        held.append(b)
            # A loop's state or a branch result is the operand's buffer:
            # writing it allocates nothing new.
            self.defines.append([b for b in defined if b not in held])
            self.holds.append(held)
            self.transient.append(max((callee_peaks.get(id(c), 0)
                                       for _, c in sequential_callees(inst)), default=0))
            # Outputs that may take over an operand's bytes when this is
            # the operand's last reader (in-place writes, elementwise reuse).
            shares = []
            for k, operand_index, output_index in \
                    in_place_pairs(inst) + elementwise_share_pairs(inst):
                if k >= len(inst.operands) or \
                        not dataflow.has_value(inst.operands[k], operand_index) or \
                        not dataflow.has_value(inst, output_index):
                    continue
                ob = alias.find(dataflow.value_at(inst.operands[k], operand_index))
                out = dataflow.value_at(inst, output_index)
                if out.instruction is inst and alias.find(out) != ob and \
                        self.size.get(ob) == out.size:
                    shares.append((ob, alias.find(out)))
            self.shares.append(shares)
        self.live_out: set[int] = set()
        if comp.root is not None:
            for _, value in dataflow.leaf_values(comp.root):
                self.live_out.add(alias.find(value))
        self.holders: dict[int, int] = {}
        for held in self.holds:
            for b in held:
                self.holders[b] = self.holders.get(b, 0) + 1

    def is_valid(self, order: list[int]) -> bool:
        if sorted(order) != list(range(len(self.instructions))):
            return False
        position = {k: t for t, k in enumerate(order)}
        return all(position[j] < position[k]
                   for k in range(len(order)) for j in self.preds[k])

    def simulate(self, order: list[int], is_entry: bool = True) -> tuple[int, list[int]]:
        """(peak bytes, bytes live after each step) of running `order`.
        In the ENTRY, parameters' buffers count from the start; in a
        computation that another runs, the buffers it shares with its
        caller (parameters, root) are the caller's and do not count."""
        remaining = dict(self.holders)
        live: set[int] = set()
        memory = 0
        if is_entry:
            for b in self.live_in:
                live.add(b)
                memory += self.size.get(b, 0)
        else:
            live.update(self.live_in | self.live_out)
        peak = memory
        after = []
        donors: set[int] = set()
        for k in order:
            taken = self._takeovers(k, remaining, live, donors)
            for b in self.defines[k]:
                if b not in live:
                    live.add(b)
                    if b not in taken:
                        memory += self.size[b]
            peak = max(peak, memory + self.transient[k])
            for b in self.holds[k]:
                remaining[b] -= 1
                if remaining[b] == 0 and b in live and b not in self.live_out and \
                        b not in self.live_in:
                    live.discard(b)
                    if b in donors:
                        donors.discard(b)   # its bytes went to an output
                    else:
                        memory -= self.size[b]
            for b in self.defines[k]:
                # Written but never read nor returned: dead at once.
                if remaining.get(b, 0) == 0 and b in live and b not in self.live_out:
                    live.discard(b)
                    memory -= self.size[b]
            after.append(memory)
        return peak, after

    def _takeovers(self, k: int, remaining: dict, live: set, donors: set) -> set[int]:
        """Outputs of step k that take over the bytes of an operand buffer
        it reads last; marks those operands as donors."""
        taken: set[int] = set()
        for b, out in self.shares[k]:
            if out in taken or b in donors or out in live or b not in live or \
                    remaining.get(b) != 1 or b in self.live_in or b in self.live_out:
                continue
            taken.add(out)
            donors.add(b)
        return taken

    # ----------------------------------------------------------- schedulers

    def list_order(self) -> list[int]:
        """Greedy: the ready instruction freeing the most bytes net of what
        it allocates first; ties in the existing order."""
        n = len(self.instructions)
        waiting = [len(p) for p in self.preds]
        remaining = dict(self.holders)
        live: set[int] = set(self.live_in)
        holders_of: dict[int, list[int]] = {}
        for k, held in enumerate(self.holds):
            for b in held:
                holders_of.setdefault(b, []).append(k)
        scheduled = [False] * n
        version = [0] * n

        def priority(k: int) -> int:
            freed = sum(self.size[b] for b in self.holds[k]
                        if remaining[b] == 1 and b not in self.live_out and
                        b not in self.live_in)
            allocated = sum(self.size[b] for b in self.defines[k] if b not in live)
            reused = sum(self.size[out] for b, out in self.shares[k]
                         if remaining.get(b) == 1 and b not in self.live_in and
                         b not in self.live_out and out not in live)
            return freed - allocated + min(reused, allocated)

        heap: list[tuple[int, int, int]] = []
        for k in range(n):
            if waiting[k] == 0:
                heapq.heappush(heap, (-priority(k), k, 0))
        order: list[int] = []
        while heap:
            _, k, v = heapq.heappop(heap)
            if scheduled[k] or v != version[k]:
                continue
            scheduled[k] = True
            order.append(k)
            for b in self.defines[k]:
                live.add(b)
            touched = []
            for b in self.holds[k]:
                remaining[b] -= 1
                if remaining[b] == 1:
                    touched.extend(j for j in holders_of[b] if not scheduled[j])
            for j in self.succs[k]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    touched.append(j)
            for j in touched:
                if waiting[j] == 0 and not scheduled[j]:
                    version[j] += 1
                    heapq.heappush(heap, (-priority(j), j, version[j]))
        if len(order) != n:
            raise HloError(f"computation '{self.comp.name}': its instructions form a "
                           "cycle (operands or control predecessors)")
        return order

    def _dfs(self, operand_key) -> list[int]:
        n = len(self.instructions)
        users = [len(s) for s in self.succs]
        roots = []
        if self.comp.root is not None:
            roots.append(self.index[id(self.comp.root)])
        roots += [k for k in range(n) if users[k] == 0 and k not in roots]
        placed = [False] * n
        order: list[int] = []
        for start in roots:
            if placed[start]:
                continue
            stack = [(start, False)]
            while stack:
                k, expanded = stack.pop()
                if expanded:
                    if not placed[k]:
                        placed[k] = True
                        order.append(k)
                    continue
                if placed[k]:
                    continue
                stack.append((k, True))
                preds = sorted(self.preds[k], key=operand_key)
                for j in reversed(preds):
                    if not placed[j]:
                        stack.append((j, False))
        # Anything left is unreachable from every user-less instruction
        # (impossible in a DAG); keep it anyway.
        order += [k for k in range(n) if not placed[k]]
        return order

    def dfs_order(self) -> list[int]:
        """XLA's DFSMemoryScheduler: operands with more extra users, then
        more cumulative bytes, are visited first."""
        n = len(self.instructions)
        extra_users = [0] * n
        total_bytes = [0] * n
        for k in range(n):  # topological
            users = len(self.succs[k])
            extra_users[k] = max(users - 1, 0) + sum(extra_users[j] for j in self.preds[k])
            total_bytes[k] = sum(self.size[b] for b in self.defines[k]) + \
                sum(total_bytes[j] for j in self.preds[k])
        names = [inst.name for inst in self.instructions]
        return self._dfs(lambda j: (-extra_users[j], -total_bytes[j], names[j]))

    def post_order(self) -> list[int]:
        return self._dfs(lambda j: 0)


@dataclass
class Schedule:
    """The order of every sequential computation of `module`, and the
    simulated peak (bytes of live arrays: parameters, temporaries and
    outputs; computations run by an instruction count while it runs)."""
    module: HloModule
    sequences: dict[int, list[HloInstruction]] = field(default_factory=dict)
    computations: list[HloComputation] = field(default_factory=list)
    peak_bytes: int = 0
    peaks: dict[str, int] = field(default_factory=dict)        # per computation
    algorithms: dict[str, str] = field(default_factory=dict)   # the winner
    memory_limit: int | None = None
    rematerialized: list[str] = field(default_factory=list)    # clone names
    # The dataflow analysis the schedule was made from (`compute_schedule`):
    # buffer assignment may reuse it for the same, unchanged module.
    dataflow: DataflowAnalysis | None = field(default=None, repr=False, compare=False)

    def sequence(self, computation: HloComputation | str) -> list[HloInstruction]:
        if isinstance(computation, str):
            for comp in self.computations:
                if comp.name == computation:
                    computation = comp
                    break
            else:
                raise KeyError(f"no sequential computation named '{computation}' "
                               f"(scheduled: {[c.name for c in self.computations]})")
        seq = self.sequences.get(id(computation))
        if seq is None:
            raise KeyError(f"computation '{computation.name}' is not scheduled: only "
                           "the ENTRY and the computations that while, conditional "
                           "and call run are (fusion bodies and reducers are not)")
        return seq

    def to_text(self) -> str:
        lines = [f"Schedule of {self.module.name}: peak {self.peak_bytes} bytes"]
        for comp in self.computations:
            lines.append(f"{comp.name} ({self.algorithms.get(comp.name, '?')}, "
                         f"peak {self.peaks.get(comp.name, 0)} bytes):")
            lines.extend(f"  {k}: {inst.name}" for k, inst in
                         enumerate(self.sequences[id(comp)]))
        return "\n".join(lines) + "\n"

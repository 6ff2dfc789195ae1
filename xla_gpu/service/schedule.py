"""Scheduling: one memory-minimizing order per sequential computation.

As XLA's DefaultMemoryScheduler, several schedulers are tried on every
computation and the order with the lowest simulated peak is kept:

* list: a greedy forward list scheduler; among the ready instructions it
  takes the one that frees the most bytes net of what it allocates;
* dfs: a post-order DFS that visits first the operand subtrees with more
  extra users and more bytes (XLA's DFSMemoryScheduler);
* post-order: the plain post order;
* the module's own order (XLA's dumps are already scheduled), when valid.

Every order respects operands and `control-predecessors`. The memory model
counts buffers (alias analysis: loop state, conditional results and
forwarded values share one), a buffer being live from the instruction that
writes it to its last reader; computations that an instruction runs (while
bodies, branches, callees) add their own peak while it runs.

With `memory_limit` (bytes), a peak above it is rematerialized
(`rematerialization.py`) or refused with a clear error.

    schedule = schedule_module(module)
    schedule.sequence(module.entry)       # [HloInstruction]
    schedule.peak_bytes
"""

from __future__ import annotations

from ..hlo.module import HloModule
from .alias_analysis import AliasAnalysis
from .dataflow import DataflowAnalysis
from .memory_model import ComputationMemoryModel, Schedule

__all__ = ["Schedule", "schedule_module", "ComputationMemoryModel",
           "SCHEDULERS"]


SCHEDULERS = ("list", "dfs", "post-order", "module")


def _best_order(model: ComputationMemoryModel, is_entry: bool) -> tuple[list[int], str, int]:
    candidates: list[tuple[str, list[int]]] = []
    natural = list(range(len(model.instructions)))
    source_order = [model.index[id(i)] for i in model.comp.instructions
                    if id(i) in model.index]
    if model.is_valid(source_order):
        candidates.append(("module", source_order))
    candidates.append(("list", model.list_order()))
    candidates.append(("dfs", model.dfs_order()))
    candidates.append(("post-order", model.post_order()))
    if not candidates:
        candidates.append(("module", natural))
    best = None
    for name, order in candidates:
        peak, _ = model.simulate(order, is_entry)
        if best is None or peak < best[2]:
            best = (order, name, peak)
    return best


def compute_schedule(module: HloModule, dataflow: DataflowAnalysis | None = None,
                     alias: AliasAnalysis | None = None) -> Schedule:
    """Schedules every sequential computation (callees first, so that each
    caller knows the peak of what it runs)."""
    dataflow = dataflow or DataflowAnalysis(module, allow_shared_calls=True)
    alias = alias or AliasAnalysis(dataflow)
    schedule = Schedule(module, computations=list(dataflow.computations), dataflow=dataflow)
    callee_peaks: dict[int, int] = {}
    for comp in reversed(dataflow.computations):
        model = ComputationMemoryModel(comp, dataflow, alias, callee_peaks)
        is_entry = comp is dataflow.entry
        order, name, peak = _best_order(model, is_entry)
        schedule.sequences[id(comp)] = [model.instructions[k] for k in order]
        schedule.algorithms[comp.name] = name
        schedule.peaks[comp.name] = peak
        callee_peaks[id(comp)] = peak
        if is_entry:
            schedule.peak_bytes = peak
    return schedule


def schedule_module(module: HloModule, memory_limit: int | None = None) -> Schedule:
    """A memory-minimizing order for every sequential computation of
    `module`. With `memory_limit` (bytes) and a peak above it, cheap
    instructions are recomputed near their later uses (this adds
    instructions to the module) until the peak fits, or ResourceError
    names the peak and the limit."""
    if memory_limit is not None and (not isinstance(memory_limit, int) or memory_limit < 0):
        raise ValueError(f"memory_limit must be a non-negative number of bytes, "
                         f"got {memory_limit!r}")
    schedule = compute_schedule(module)
    schedule.memory_limit = memory_limit
    if memory_limit is not None and schedule.peak_bytes > memory_limit:
        from .rematerialization import rematerialize
        schedule = rematerialize(module, schedule, memory_limit)
    return schedule

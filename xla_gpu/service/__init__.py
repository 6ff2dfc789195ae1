"""The back half of the compiler that needs no MLIR: scheduling,
dataflow and alias analysis, live ranges, the heap simulator and buffer
assignment (XLA's service/ folder). Imports only `xla_gpu.hlo`, numpy and
the runtime's records (`Allocation`, `BufferSlice`, `MemoryAnalysis`).

    from xla_gpu.service import schedule_module, assign_buffers
    schedule = schedule_module(module, memory_limit=None)
    schedule.sequence(module.entry)          # [HloInstruction]
    assignment = assign_buffers(module, schedule)
    assignment.slice(inst, shape_index)      # BufferSlice
    assignment.memory_analysis()             # jax's field names
"""

from .alias_analysis import AliasAnalysis, HloBuffer
from .buffer_assignment import BufferAssignment, MemoryAnalysis, assign_buffers
from .dataflow import DataflowAnalysis, HloValue
from .liveness import LiveRanges
from .schedule import Schedule, schedule_module

__all__ = ["schedule_module", "assign_buffers", "Schedule", "BufferAssignment",
           "MemoryAnalysis", "DataflowAnalysis", "AliasAnalysis", "HloValue",
           "HloBuffer", "LiveRanges"]

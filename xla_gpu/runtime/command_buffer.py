"""Command buffers: runs of device thunks recorded once into a CUDA graph and
replayed (XLA's CommandBufferThunk over GpuCommandBuffer).

The conversion pass (`convert`) replaces each run of consecutive
kernel/copy/memset/gemm thunks (at least `min_size` of them) by one
`CommandBufferThunk`, in the top-level sequence and inside while bodies,
conditions and conditional branches, as XLA's CommandBufferConversionPass.
A while loop of known trip count whose body is such thunks alone joins the
run, unrolled (XLA's xla_gpu_command_buffer_unroll_loops), when the
unrolled commands number at most `UNROLL_LIMIT`: a scan of a few dozen
steps is then one graph launch, not one per step.

On cuda the first execution captures the thunks' launches on the execution
stream (cuStreamBeginCapture .. cuStreamEndCapture), instantiates the graph
and launches it; later executions launch the instantiated graph when the
buffer addresses it was recorded with are unchanged, and otherwise record
again and update the instantiated graph in place (cuGraphExecUpdate; a new
instantiation when the update is refused). Capture needs a stream other
than the legacy default stream: the program's stream, else a private one
that the default stream is ordered with through events. On the cpu target
a command buffer simply runs its thunks in order (the same structure).
"""

from __future__ import annotations

from typing import Sequence

from .cuda_graph import execute
from .thunks import (COMMAND_BUFFER_KINDS, CommandBufferThunk, ConditionalThunk, Thunk,
                     WhileThunk)

__all__ = ["convert", "execute", "UNROLL_LIMIT", "unrolled_size"]

# The most commands a counted loop may add to a command buffer unrolled: a
# graph's nodes cost instantiation time and memory.
UNROLL_LIMIT = 512


def unrolled_size(thunk: Thunk) -> int | None:
    """How many commands `thunk` records into a command buffer, loops of
    known trip count unrolled; None when it cannot be recorded (another
    kind, a loop of unknown count, a nested command buffer)."""
    if thunk.kind in COMMAND_BUFFER_KINDS:
        return 1
    if isinstance(thunk, WhileThunk) and thunk.trip_count is not None:
        sizes = [unrolled_size(t) for t in thunk.body]
        if any(size is None for size in sizes):
            return None
        return thunk.trip_count * sum(sizes)
    return None


def convert(thunks: Sequence[Thunk], min_size: int = 2,
            _counter: list[int] | None = None) -> list[Thunk]:
    """The sequence with each run of at least `min_size` consecutive
    kernel/copy/memset/gemm thunks (and loops of known trip count over such
    thunks, up to UNROLL_LIMIT commands unrolled) wrapped into a command
    buffer; nested sequences (while, conditional) converted the same way.
    Command buffers are numbered in program order."""
    out: list[Thunk] = []
    run: list[Thunk] = []
    counter = [0] if _counter is None else _counter

    recorded = [0]   # the commands `run` records, loops unrolled

    def flush():
        if recorded[0] >= min_size:
            counter[0] += 1
            out.append(CommandBufferThunk(f"command_buffer.{counter[0]}", list(run)))
        else:   # too little to record (no loop in it: a loop records >= 2)
            out.extend(run)
        run.clear()
        recorded[0] = 0

    for thunk in thunks:
        size = unrolled_size(thunk)
        if size is not None and size <= UNROLL_LIMIT and \
                (size >= min_size or thunk.kind in COMMAND_BUFFER_KINDS):
            run.append(thunk)
            recorded[0] += size
            continue
        flush()
        if isinstance(thunk, WhileThunk):
            thunk.condition = convert(thunk.condition, min_size, counter)
            thunk.body = convert(thunk.body, min_size, counter)
        elif isinstance(thunk, ConditionalThunk):
            thunk.branches = [convert(b, min_size, counter) for b in thunk.branches]
        out.append(thunk)
    flush()
    return out

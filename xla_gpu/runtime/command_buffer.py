"""Command buffers: runs of device thunks recorded once into a CUDA graph and
replayed (XLA's CommandBufferThunk over GpuCommandBuffer).

The conversion pass (`convert`) replaces each run of consecutive
kernel/copy/memset/gemm thunks (at least `min_size` of them) by one
`CommandBufferThunk`, in the top-level sequence and inside while bodies,
conditions and conditional branches, as XLA's CommandBufferConversionPass.

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

__all__ = ["convert", "execute"]


def convert(thunks: Sequence[Thunk], min_size: int = 2,
            _counter: list[int] | None = None) -> list[Thunk]:
    """The sequence with each run of at least `min_size` consecutive
    kernel/copy/memset/gemm thunks wrapped into a command buffer; nested
    sequences (while, conditional) converted the same way. Command buffers
    are numbered in program order."""
    out: list[Thunk] = []
    run: list[Thunk] = []
    counter = [0] if _counter is None else _counter

    def flush():
        if len(run) >= min_size:
            counter[0] += 1
            out.append(CommandBufferThunk(f"command_buffer.{counter[0]}", list(run)))
        else:
            out.extend(run)
        run.clear()

    for thunk in thunks:
        if thunk.kind in COMMAND_BUFFER_KINDS:
            run.append(thunk)
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

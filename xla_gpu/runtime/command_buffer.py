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

from .thunks import (COMMAND_BUFFER_KINDS, CommandBufferThunk, ConditionalThunk,
                     ExecutionContext, Thunk, WhileThunk)

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


class _Graph:
    """One recorded command buffer: the instantiated graph and the base
    addresses it was recorded with."""

    def __init__(self):
        self.exec = None
        self.graph = None
        self.addresses: tuple | None = None
        self.records = 0
        self.updates = 0


_private_streams: dict = {}


def _capture_stream(ctx: ExecutionContext):
    """A stream that can be captured: the caller's, else a private
    non-blocking stream per context (the legacy stream cannot be)."""
    from .cuda import _check, _driver
    if ctx.stream not in (None, 0):
        return ctx.stream, False
    cu = _driver()
    key = "default"
    stream = _private_streams.get(key)
    if stream is None:
        stream = _check("cuStreamCreate", cu.cuStreamCreate(
            cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        _private_streams[key] = stream
    return stream, True


def _order_after(cu, _check, waiter, producer) -> None:
    """`waiter` waits for the work queued so far on `producer`."""
    event = _check("cuEventCreate", cu.cuEventCreate(
        cu.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    try:
        _check("cuEventRecord", cu.cuEventRecord(event, producer))
        _check("cuStreamWaitEvent", cu.cuStreamWaitEvent(waiter, event, 0))
    finally:
        cu.cuEventDestroy(event)


def execute(thunk: CommandBufferThunk, ctx: ExecutionContext) -> None:
    from .cuda import _check, _driver
    cu = _driver()
    state: _Graph = thunk._graphs.setdefault("graph", _Graph())
    addresses = tuple(ctx._bases[i] for i in thunk.allocations())
    stream, private = _capture_stream(ctx)
    if private:   # the private stream continues the default stream's work
        _order_after(cu, _check, stream, ctx.stream or 0)
    if state.exec is None or state.addresses != addresses:
        for command in thunk.sequence:   # no library set-up inside a capture
            command.prepare(ctx)
        saved = ctx.stream
        ctx.stream = stream
        try:
            _check("cuStreamBeginCapture", cu.cuStreamBeginCapture(
                stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
            try:
                for command in thunk.sequence:
                    command.execute(ctx)
            finally:
                graph = _check("cuStreamEndCapture", cu.cuStreamEndCapture(stream))
        finally:
            ctx.stream = saved
        updated = False
        if state.exec is not None:
            result = cu.cuGraphExecUpdate(state.exec, graph)
            err = result[0] if isinstance(result, tuple) else result
            updated = err == cu.CUresult.CUDA_SUCCESS
            if updated:
                state.updates += 1
            else:
                cu.cuGraphExecDestroy(state.exec)
                state.exec = None
        if not updated:
            state.exec = _check("cuGraphInstantiate", cu.cuGraphInstantiate(graph, 0))
        if state.graph is not None:
            cu.cuGraphDestroy(state.graph)
        state.graph = graph
        state.addresses = addresses
        state.records += 1
        recorded = True
    else:
        recorded = False
    _check("cuGraphLaunch", cu.cuGraphLaunch(state.exec, stream))
    if not recorded:   # the replay launches what the recording launched
        ctx.stats["kernels"] += sum(1 for c in thunk.sequence if c.kind == "kernel")
        ctx.stats["gemms"] += sum(1 for c in thunk.sequence if c.kind == "gemm")
    if private:   # later work on the default stream sees the graph's results
        _order_after(cu, _check, ctx.stream or 0, stream)

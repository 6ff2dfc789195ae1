"""Replaying a command buffer on cuda: its thunks' launches captured on
the execution stream into a CUDA graph, instantiated, and launched again
while the buffer addresses they were recorded with are unchanged (see
`command_buffer`, which re-exports `execute`). The thunks call it, so it
imports none of them: it takes the CommandBufferThunk and its
ExecutionContext as they come.
"""

from __future__ import annotations

from typing import Any

__all__ = ["execute"]


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


def _capture_stream(ctx: Any):
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


_order_events: dict = {}


def _order_after(cu, _check, waiter, producer) -> None:
    """`waiter` waits for the work queued so far on `producer`. One event
    per (waiter, producer) pair, made once: a wait takes the event's state
    when it is queued, so recording it again later is safe, and each run
    saves an event's creation and destruction."""
    key = (int(waiter), int(producer))
    event = _order_events.get(key)
    if event is None:
        event = _order_events[key] = _check("cuEventCreate", cu.cuEventCreate(
            cu.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    _check("cuEventRecord", cu.cuEventRecord(event, producer))
    _check("cuStreamWaitEvent", cu.cuStreamWaitEvent(waiter, event, 0))


def _count_replay(sequence, stats, times: int) -> None:
    """The launches and loop iterations a replay stands for: what recording
    `sequence` counted (unrolled loops of known trip count included)."""
    for command in sequence:
        if command.kind in ("kernel", "gemm"):
            stats[command.kind + "s"] += times
        elif command.kind == "while":
            stats["while_iterations"] += times * command.trip_count
            _count_replay(command.body, stats, times * command.trip_count)


def execute(thunk: Any, ctx: Any) -> None:
    """Runs a CommandBufferThunk's commands as one CUDA graph."""
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
        # Nothing inside a capture is timed on its own (the profiler times
        # the whole graph; events recorded while capturing are no times).
        saved, saved_profiler = ctx.stream, ctx.profiler
        ctx.stream, ctx.profiler = stream, None
        try:
            _check("cuStreamBeginCapture", cu.cuStreamBeginCapture(
                stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
            try:
                for command in thunk.sequence:
                    command.execute(ctx)
            finally:
                graph = _check("cuStreamEndCapture", cu.cuStreamEndCapture(stream))
        finally:
            ctx.stream, ctx.profiler = saved, saved_profiler
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
        _count_replay(thunk.sequence, ctx.stats, 1)
    if private:   # later work on the default stream sees the graph's results
        _order_after(cu, _check, ctx.stream or 0, stream)

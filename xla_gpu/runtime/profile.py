"""Profiles of runs: every thunk an execution runs, as trace events.

With a profiler on its `ExecutionContext`, a run records one event per
thunk it executes, nested as they nest: a while loop holds one event per
iteration, each holding its condition's and body's thunks; a sort,
convolution or command buffer holds the thunks it runs. Each event carries
the thunk's kind, the bytes it reads and writes and, for a kernel, its
launch shape. On the cpu target the events are the host's wall time of
each thunk. On cuda the host events show when each thunk was issued, and
a second lane ("GPU stream") shows what the GPU spent on each leaf thunk,
from CUDA events recorded around it on the stream (a command buffer is one
leaf there: a CUDA graph is timed as a whole).

A profiled cpu run goes through the thunks in Python rather than the
native executor, so that every thunk can be timed; a run without a
profile is untouched.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .._trace import RUN_PROCESS, Trace

__all__ = ["RunProfiler", "thunk_arguments"]

# Lanes (trace threads) of the run process.
GPU_LANE_BASE = 1 << 30


def thunk_arguments(thunk) -> dict[str, Any]:
    """What a trace event says about `thunk` besides its name and time."""
    args: dict[str, Any] = {"kind": thunk.kind}
    uses = thunk.buffer_uses()
    if uses:
        read = sum(s.size for s, written in uses if not written)
        written = sum(s.size for s, w in uses if w)
        args["bytes_read"], args["bytes_written"] = read, written
    if thunk.kind == "kernel":
        args["kernel"] = thunk.kernel
        args["launch"] = f"{thunk.blocks}x{thunk.threads}"
        if thunk.shared_bytes:
            args["shared_bytes"] = thunk.shared_bytes
    elif thunk.kind == "while" and thunk.trip_count is not None:
        args["trip_count"] = thunk.trip_count
    elif thunk.kind == "custom_call":
        args["target"] = getattr(thunk, "target", "")
    elif thunk.kind == "command_buffer":
        args["commands"] = len(thunk.sequence)
    return args


class RunProfiler:
    """Records the thunks of one execution into `trace` (run process;
    the calling thread's lane, or `lane` for a device of a many-device
    run)."""

    def __init__(self, trace: Trace, program: str, target: str, lane: int | None = None,
                 lane_name: str | None = None):
        self.trace, self.program, self.target = trace, program, target
        self.lane = threading.get_native_id() if lane is None else lane
        trace.name_process(RUN_PROCESS, f"xla_gpu run ({target})")
        trace.name_thread(RUN_PROCESS, self.lane,
                          lane_name or f"{threading.current_thread().name} (host)")
        self._arguments: dict[int, dict[str, Any]] = {}
        # cuda: (thunk, start CUevent, end CUevent) of each leaf thunk.
        self._gpu_events: list[tuple[Any, Any, Any]] = []
        self._stream = None

    def _add(self, name: str, category: str, start: float, end: float,
             args: dict[str, Any] | None) -> None:
        self.trace.add(name, category, start, end, pid=RUN_PROCESS, tid=self.lane, args=args)

    def arguments(self, thunk) -> dict[str, Any]:
        known = self._arguments.get(id(thunk))
        if known is None:
            known = self._arguments[id(thunk)] = thunk_arguments(thunk)
        return known

    def execute(self, thunk, ctx) -> None:
        """Runs `thunk` on `ctx`, recording it."""
        gpu_leaf = ctx.target == "cuda" and (not thunk.thunks or
                                             thunk.kind == "command_buffer")
        start = time.perf_counter()
        try:
            if gpu_leaf:
                self._execute_timed_on_gpu(thunk, ctx)
            else:
                thunk.execute(ctx)
        finally:
            self._add(thunk.name, thunk.kind, start, time.perf_counter(),
                      self.arguments(thunk))

    def iteration(self, loop, index: int, start: float) -> None:
        """Records iteration `index` of while thunk `loop`, from `start`."""
        self._add(f"{loop.name} iteration {index}", "while_iteration", start,
                  time.perf_counter(), {"kind": "while_iteration", "iteration": index})

    def run(self, thunks, ctx) -> None:
        """Executes `thunks` on `ctx` as one recorded run."""
        start = time.perf_counter()
        for thunk in thunks:
            self.execute(thunk, ctx)
        end = time.perf_counter()
        self._add(f"run {self.program}", "run", start, end, {"kind": "run",
                                                               "thunks": len(thunks)})

    # -- cuda: GPU-side times from events on the stream ----------------------

    def _execute_timed_on_gpu(self, thunk, ctx) -> None:
        from .cuda import _check, _driver
        cu = _driver()
        stream = ctx.stream or 0
        self._stream = stream
        flags = cu.CUevent_flags.CU_EVENT_DEFAULT
        begin = _check("cuEventCreate", cu.cuEventCreate(flags))
        end = _check("cuEventCreate", cu.cuEventCreate(flags))
        _check("cuEventRecord", cu.cuEventRecord(begin, stream))
        # A command buffer is captured and replayed as one graph: its
        # thunks must not record events into the capture.
        profiler, ctx.profiler = ctx.profiler, None
        try:
            thunk.execute(ctx)
        finally:
            ctx.profiler = profiler
            _check("cuEventRecord", cu.cuEventRecord(end, stream))
        self._gpu_events.append((thunk, begin, end))

    def finish_gpu(self, host_start: float) -> None:
        """cuda, after the stream is synchronized: records the GPU lane,
        its first event placed at `host_start` (perf_counter seconds: when
        the run's first thunk was issued) and the rest at their GPU offsets
        from it; frees the events."""
        if not self._gpu_events:
            return
        from .cuda import _check, _driver
        cu = _driver()
        lane = GPU_LANE_BASE + (self.lane & 0xFFFF)
        self.trace.name_thread(RUN_PROCESS, lane, f"GPU stream {self._stream or 0}")
        first = self._gpu_events[0][1]
        try:
            for thunk, begin, end in self._gpu_events:
                offset = _check("cuEventElapsedTime", cu.cuEventElapsedTime(first, begin))
                length = _check("cuEventElapsedTime", cu.cuEventElapsedTime(begin, end))
                at = host_start + float(offset) / 1e3
                self.trace.add(thunk.name, thunk.kind, at, at + float(length) / 1e3,
                               pid=RUN_PROCESS, tid=lane,
                               args={**self.arguments(thunk), "timing": "gpu"})
        finally:
            for _, begin, end in self._gpu_events:
                cu.cuEventDestroy(begin)
                cu.cuEventDestroy(end)
            self._gpu_events.clear()

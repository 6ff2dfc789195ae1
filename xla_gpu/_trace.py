"""Traces in the Chrome trace-event format (the JSON that Perfetto's UI,
chrome://tracing and TensorBoard's trace viewer open).

A `Trace` collects complete events ("ph": "X": a name, a start and a
duration in microseconds, a process and a thread) from every thread that
works for it. Compiling records HLO passes, scheduling, buffer assignment
and each kernel's stages on the thread that ran them; running records
every thunk (see `xla_gpu.runtime.profile`).

    with recording(Trace()) as trace:     # or xla_gpu.trace("t.json")
        exe = xla_gpu.compile(text)
        exe.run(x)
    trace.write("t.json")

A trace is active in a context (a `ContextVar`), so two threads compiling
for different traces do not mix; work handed to another thread carries the
context with it (`carry`). `XLA_GPU_PROFILE=path` records everything the
process compiles and runs into one trace written at exit (the variable is
read when xla_gpu is imported).

When no trace is active, each hook costs one context-variable read.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import os
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import ArgumentError

__all__ = ["Trace", "current", "recording", "span", "complete", "carry", "trace_file",
           "write_file",
           "COMPILE_PROCESS", "RUN_PROCESS", "MAX_EVENTS"]

# Process ids of the trace: the viewers group threads under them.
COMPILE_PROCESS = 1
RUN_PROCESS = 2
_PROCESS_NAMES = {COMPILE_PROCESS: "xla_gpu compile", RUN_PROCESS: "xla_gpu run"}
# A trace keeps at most this many events (a long run of a loop would
# otherwise grow without bound); what comes later is counted, not kept.
MAX_EVENTS = 2_000_000
_PROCESS_ORIGIN = time.perf_counter()


class Trace:
    """Events of one trace; safe to add to from many threads."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._threads: dict[tuple[int, int], str] = {}
        self._processes: dict[int, str] = {}
        self.dropped = 0
        # Time 0 of the trace, in perf_counter seconds: when this module was
        # imported, so that work begun before the trace was made (a compile
        # under XLA_GPU_PROFILE, whose trace starts with its first event)
        # has no negative time, and traces of one process share a clock.
        self.origin = _PROCESS_ORIGIN

    def name_process(self, pid: int, name: str) -> None:
        with self._lock:
            self._processes[pid] = name

    def name_thread(self, pid: int, tid: int, name: str) -> None:
        with self._lock:
            self._threads[(pid, tid)] = name

    def add(self, name: str, category: str, start: float, end: float, *,
            pid: int = COMPILE_PROCESS, tid: int | None = None,
            args: dict[str, Any] | None = None) -> None:
        """A complete event from `start` to `end` (perf_counter seconds) on
        thread `tid` of process `pid` (default: the calling thread)."""
        if tid is None:
            tid = threading.get_native_id()
            key = (pid, tid)
            if key not in self._threads:
                self.name_thread(pid, tid, threading.current_thread().name)
        # Whole nanoseconds from the origin: an event inside another one
        # stays inside it after rounding (viewers nest events by time).
        start_ns = round((start - self.origin) * 1e9)
        end_ns = max(round((end - self.origin) * 1e9), start_ns)
        event = {"name": name, "cat": category, "ph": "X", "pid": pid, "tid": tid,
                 "ts": start_ns / 1000, "dur": (end_ns - start_ns) / 1000}
        if args:
            event["args"] = args
        with self._lock:
            if len(self._events) >= MAX_EVENTS:
                self.dropped += 1
                return
            self._events.append(event)

    def events(self) -> list[dict[str, Any]]:
        """The complete events, in the order they ended."""
        with self._lock:
            return list(self._events)

    def to_json(self) -> dict[str, Any]:
        """The trace as the trace-event format's JSON object."""
        with self._lock:
            events = list(self._events)
            processes = {**_PROCESS_NAMES, **self._processes}
            threads = dict(self._threads)
        used = {e["pid"] for e in events} | {pid for pid, _ in threads}
        meta: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
            for pid, name in sorted(processes.items()) if pid in used]
        meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                  "args": {"name": name}} for (pid, tid), name in sorted(threads.items())]
        # Sorted by start, longer first on a tie: the order in which a viewer
        # nests events that begin together.
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        other: dict[str, Any] = {"producer": "xla_gpu"}
        if self.dropped:
            other["dropped_events"] = self.dropped
        return {"traceEvents": meta + events, "displayTimeUnit": "ns",
                "otherData": other}

    def write(self, path: str | os.PathLike) -> Path:
        """Writes the trace as JSON to `path` (a new file, or one replaced
        in one step); returns the path."""
        return write_file(path, json.dumps(self.to_json(), separators=(",", ":")))


def write_file(path: str | os.PathLike, text: str) -> Path:
    """Writes `text` to `path` as a new file that replaces the old one in
    one step, never through a symbolic link planted at `path`."""
    path = Path(path)
    if path.is_symlink():
        raise ArgumentError(f"profile: {path} is a symbolic link; not writing through it")
    if path.is_dir():
        raise ArgumentError(f"profile: {path} is a directory; give a file name "
                            "such as run.json")
    if not path.parent.is_dir():
        raise ArgumentError(f"profile: the folder of {path} does not exist")
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.unlink(missing_ok=True)
        with open(partial, "x", encoding="utf-8") as f:   # "x": not through a link
            f.write(text)
        os.replace(partial, path)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise ArgumentError(f"profile: cannot write {path}: {e.strerror or e}") from None
    return path


_active: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "xla_gpu_trace", default=None)
# The process-wide trace of XLA_GPU_PROFILE (made on first use).
_process_trace: Trace | None = None
_process_lock = threading.Lock()


# XLA_GPU_PROFILE, read once when xla_gpu is imported (a run reads no
# environment variable).
_PROFILE_PATH = os.environ.get("XLA_GPU_PROFILE") or None


def current() -> Trace | None:
    """The trace that work in this context records into, or None."""
    trace = _active.get()
    if trace is None and _PROFILE_PATH is not None:
        return _from_environment()
    return trace


def _from_environment() -> Trace:
    global _process_trace
    with _process_lock:
        if _process_trace is None:
            _process_trace = Trace()
            atexit.register(_write_at_exit, _process_trace, _PROFILE_PATH)
        return _process_trace


def _write_at_exit(trace: Trace, path: str) -> None:
    try:
        trace.write(path)
    except Exception as e:   # at exit an exception would only print a traceback
        print(f"xla_gpu: XLA_GPU_PROFILE: {e}", file=__import__("sys").stderr)


@contextmanager
def recording(trace: Trace | None = None) -> Iterator[Trace]:
    """Records what this context compiles and runs into `trace` (a new
    one by default) until the block ends."""
    trace = Trace() if trace is None else trace
    token = _active.set(trace)
    try:
        yield trace
    finally:
        _active.reset(token)


@contextmanager
def trace_file(path: str | os.PathLike | None) -> Iterator[Trace | None]:
    """Records the block into a new trace written to `path` at its end
    (also when the block fails); does nothing for None."""
    if path is None:
        yield None
        return
    _check_path(path)
    with recording() as trace:
        try:
            yield trace
        finally:
            trace.write(path)


def _check_path(path: Any) -> None:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ArgumentError(f"profile= takes a file path, got {path!r}")
    target = Path(path)
    if target.is_dir():
        raise ArgumentError(f"profile: {target} is a directory; give a file name such "
                            "as run.json")
    if not target.parent.is_dir():
        raise ArgumentError(f"profile: the folder of {target} does not exist")


_NOTHING_TO_RECORD = nullcontext()


def span(name: str, category: str, **args: Any):
    """Records the block as an event of the current trace (if any) on the
    calling thread of the compile process. Without a trace: one shared
    do-nothing context manager, no generator made."""
    trace = current()
    if trace is None:
        return _NOTHING_TO_RECORD
    return _recorded(trace, name, category, args)


@contextmanager
def _recorded(trace: Trace, name: str, category: str, args: dict) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        trace.add(name, category, start, time.perf_counter(), args=args or None)


def complete(name: str, category: str, start: float, end: float | None = None,
             **args: Any) -> None:
    """Records an event measured by the caller (perf_counter seconds; `end`
    defaults to now) on the calling thread, if a trace is active."""
    trace = current()
    if trace is not None:
        trace.add(name, category, start, time.perf_counter() if end is None else end,
                  args=args or None)


def carry(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` bound to the calling context, for work handed to another
    thread: what it records goes to the caller's trace. `fn` itself when
    no trace is active (nothing to carry)."""
    if current() is None:
        return fn
    context = contextvars.copy_context()
    # A context runs on one thread at a time: each call gets its own copy.
    return lambda *a, **k: context.copy().run(fn, *a, **k)

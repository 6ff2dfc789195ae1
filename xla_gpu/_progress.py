"""Progress of long compiles on a terminal.

A `Progress` shows one status line (rewritten in place with a carriage
return) while a whole program compiles: the current stage and, while
kernels compile, how many of them are done. It draws only on a terminal
(`stream.isatty()`), at most `MAX_REDRAWS_PER_SECOND` times a second, and
clears its line when it is done, so that what is printed after it starts
on a clean line. The CLIs turn it on (`--quiet` turns it off); a compile
reports to the one active in its context, if any.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, TextIO

__all__ = ["Progress", "current", "reporting", "stage"]

MAX_REDRAWS_PER_SECOND = 10


class Progress:
    """A status line on `stream`; drawn only when `enabled` (default:
    when `stream` is a terminal). Safe to update from many threads."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None,
                 label: str = "xla_gpu"):
        self.stream = sys.stderr if stream is None else stream
        if enabled is None:
            try:
                enabled = bool(self.stream.isatty())
            except (AttributeError, ValueError, OSError):
                enabled = False
        self.enabled = enabled
        self.label = label
        self.current_stage = ""
        self.kernels_done = 0
        self.kernels_total = 0
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._last_draw = 0.0
        self._width = 0

    def stage(self, name: str) -> None:
        with self._lock:
            self.current_stage = name
        self._draw(force=True)

    def kernels(self, total: int) -> None:
        """`total` kernels are to be compiled (none done yet)."""
        with self._lock:
            self.kernels_total, self.kernels_done = total, 0
        self._draw(force=True)

    def kernel_done(self) -> None:
        with self._lock:
            self.kernels_done += 1
        self._draw()

    def line(self) -> str:
        with self._lock:
            text = f"[{self.label}] {self.current_stage}"
            if self.kernels_total:
                text += f": kernels {self.kernels_done}/{self.kernels_total}"
        return f"{text} ({time.perf_counter() - self.started:.1f} s)"

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last_draw < 1.0 / MAX_REDRAWS_PER_SECOND:
            return
        self._last_draw = now
        text = self.line()
        with self._lock:
            pad = max(self._width - len(text), 0)
            self._width = len(text)
            try:
                self.stream.write("\r" + text + " " * pad)
                self.stream.flush()
            except (OSError, ValueError):   # a closed or broken terminal
                self.enabled = False

    def close(self) -> None:
        """Clears the status line."""
        if not self.enabled or not self._width:
            return
        with self._lock:
            try:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self._width = 0


_active: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "xla_gpu_progress", default=None)


def current() -> Progress | None:
    return _active.get()


@contextmanager
def reporting(progress: Progress) -> Iterator[Progress]:
    """Compiles in this context report to `progress`; its line is cleared
    when the block ends."""
    token = _active.set(progress)
    try:
        yield progress
    finally:
        _active.reset(token)
        progress.close()


def stage(name: str) -> None:
    """Tells the active progress line (if any) that `name` has begun."""
    progress = _active.get()
    if progress is not None:
        progress.stage(name)

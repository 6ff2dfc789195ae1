"""The rendezvous of a compiled program run on many devices (the cpu
target's emulated devices: one thread each, one set of buffers each).

A `Communicator` is made per run. Each device's collective thunks meet
their group there through the device's `DeviceEndpoint` (the execution
context's `collectives`): a meeting is keyed by the thunk (its instruction),
how many times this device ran it before (a collective in a while loop
meets once per iteration) and the group's devices; the last participant to
arrive computes every participant's share with the numpy semantics of
`xla_gpu.hlo.collectives`, the others wait.

The rendezvous itself is the reference interpreter's (`Session` of
`xla_gpu.hlo.interpreter.devices`, which `evaluate_devices` uses): the
compiled run fails the same way. A meeting that can no longer complete
fails at once for every participant that waits there or comes later: a
participant failed (its error names that device and its error) or finished
its program without reaching it. A participant that waits longer than the
run's `timeout` fails the meeting with CollectiveTimeoutError and stops
every device; a device stopped that way (or by the caller's Ctrl-C) stops at
its next collective, or at its next loop iteration (`ExecutionContext.
cancel`). Nothing waits forever.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..errors import DeadlineExceededError
from ..hlo.collectives import CollectiveError, CollectiveTimeoutError
from ..hlo.interpreter.devices import Session

__all__ = ["DeviceRun", "Communicator", "DeviceEndpoint", "CollectiveError", "CollectiveTimeoutError",
           "DEFAULT_TIMEOUT"]

# Seconds a device waits at a collective for its peers by default.
DEFAULT_TIMEOUT = 60.0


class DeviceEndpoint:
    """One device's side of a run's rendezvous: its ids, and how many times
    it ran each collective."""

    def __init__(self, communicator: "Communicator", device: int):
        self.communicator = communicator
        self.device = device
        self.num_replicas = communicator.num_replicas
        self.num_partitions = communicator.num_partitions
        self.replica_id, self.partition_id = divmod(device, communicator.num_partitions)
        self._executions: dict[str, int] = {}

    def next_execution(self, thunk) -> int:
        """How many times this device ran `thunk`'s collective before (0
        the first time), counting this run."""
        count = self._executions.get(thunk.name, 0)
        self._executions[thunk.name] = count + 1
        return count

    def executions_of(self, thunk) -> int:
        """How many times this device ran `thunk`'s collective so far (what
        `next_execution` returns next): a meeting's key across processes."""
        return self._executions.get(thunk.name, 0)

    def meet(self, thunk, group: tuple[int, ...], contribution: Any,
             compute: Callable[[list], list]) -> Any:
        """This device's share of `thunk`'s collective over `group` (global
        device ids in group order; this device among them). `compute`
        takes the contributions in group order and returns the shares in
        group order; the last device to arrive runs it."""
        return self.communicator.meet(self, thunk, group, contribution, compute)


class DeviceRun:
    """One device of a many-device run: its side of the rendezvous, its
    buffer pool, and what its execution counted."""

    def __init__(self, communicator, device: int, pool):
        self.communicator = communicator
        self.endpoint = communicator.endpoints[device]
        self.pool = pool
        self.stats: dict[str, int] = {}


class Communicator(Session):
    """The rendezvous of one run on num_replicas x num_partitions devices
    (device d is replica d // num_partitions, partition d %
    num_partitions)."""

    def __init__(self, num_replicas: int, num_partitions: int,
                 timeout: float = DEFAULT_TIMEOUT):
        super().__init__(num_replicas, num_partitions, float(timeout))
        self.endpoints = [DeviceEndpoint(self, d) for d in range(self.num_devices)]
        # What stops each device's execution where it runs (set while it runs).
        self._cancels: dict[int, Callable[[], None]] = {}
        self._cancel_lock = threading.Lock()

    def running(self, device: int, cancel: Callable[[], None] | None) -> None:
        """Device `device` runs (cancel: what stops it) or stopped (None)."""
        with self._cancel_lock:
            if cancel is None:
                self._cancels.pop(device, None)
                return
            self._cancels[device] = cancel
            stopped = self.stop is not None
        if stopped:
            cancel()

    def _stop_all(self, failure) -> None:
        first = self.stop is None
        super()._stop_all(failure)
        if first:
            with self._cancel_lock:
                cancels = list(self._cancels.values())
            for cancel in cancels:
                cancel()

    def device_error(self, device: int, error: BaseException) -> BaseException:
        """What a device's run raised, as the run reports it: a device that
        the run stopped in a loop (its deadline set by `cancel`) reports why
        the run stopped."""
        if isinstance(error, DeadlineExceededError) and self.stop is not None:
            failure = self.stop
            stopped = failure.error_class(f"{self.where(device)} was stopped: "
                                          f"{failure.message}", failure.instruction,
                                          failure.missing)
            self._stop_errors.add(id(stopped))
            return stopped
        return error


def describe_devices(num_replicas: int, num_partitions: int) -> str:
    """`8 devices (1 replica x 8 partitions)` for messages."""
    n = num_replicas * num_partitions
    return (f"{n} device{'s' if n != 1 else ''} ({num_replicas} "
            f"replica{'s' if num_replicas != 1 else ''} x {num_partitions} "
            f"partition{'s' if num_partitions != 1 else ''})")

"""Many devices: `evaluate_devices` runs a module on num_replicas x
num_partitions devices, each an `Evaluator` in its own thread, and the
collectives meet in a rendezvous (`Session`).

A rendezvous is keyed by (the instruction, how many times the device ran
it before, the group's devices): a collective in a while loop meets once per
iteration, and disjoint groups meet apart. The last participant to arrive
computes every participant's share; the others wait.

Nothing hangs. A rendezvous that can no longer complete fails at once, for
the participants that wait there and for those that arrive later: a
participant failed or finished its program without reaching it, or every
device still running waits at a rendezvous none of them can complete (a
deadlock). Each such device's error (CollectiveError) names the
instruction and the devices that cannot arrive; a device stopped that way
counts as failed for the rendezvous that wait for it. A participant that
waits longer than `timeout` seconds fails the rendezvous with
CollectiveTimeoutError and stops every device (at its next instruction):
the late devices may be in a loop that does not end. A device that fails
while no rendezvous waits for it stops no other device."""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import ArgumentError, HloError
from ..collectives import CollectiveError, CollectiveTimeoutError
from ..module import HloInstruction, HloModule
from .arguments import check_argument, flatten
from .core import Evaluator
from .dtypes import Value

__all__ = ["evaluate_devices", "Session", "DeviceEvaluator", "MAX_DEVICES"]

# Each device is a thread: more than this many is refused.
MAX_DEVICES = 4096


class _Failure:
    """Why a rendezvous (or the whole run) cannot go on: the message every
    affected device's error carries, the collective and the devices that
    cannot arrive there."""

    def __init__(self, message: str, instruction: str | None = None,
                 missing: Sequence[int] = (), timeout: bool = False):
        self.message, self.instruction = message, instruction
        self.missing, self.timeout = tuple(missing), timeout

    @property
    def error_class(self) -> type[CollectiveError]:
        return CollectiveTimeoutError if self.timeout else CollectiveError


class _Meeting:
    __slots__ = ("inst", "group", "arrived", "complete", "results", "error", "failure")

    def __init__(self, inst: HloInstruction, group: tuple[int, ...]):
        self.inst, self.group = inst, group
        self.arrived: dict[int, Any] = {}
        self.complete = False           # every participant arrived
        self.results: dict[int, Any] | None = None
        self.error: BaseException | None = None    # computing the shares failed
        self.failure: _Failure | None = None       # it cannot complete

    def missing(self) -> list[int]:
        return [d for d in self.group if d not in self.arrived]


def _describe(inst: HloInstruction) -> str:
    return f"instruction '{inst.name}' ({inst.opcode})"


class Session:
    """The rendezvous of one multi-device run."""

    def __init__(self, num_replicas: int, num_partitions: int, timeout: float):
        self.num_replicas, self.num_partitions = num_replicas, num_partitions
        self.num_devices = num_replicas * num_partitions
        self.timeout = timeout
        self.cond = threading.Condition()
        self.meetings: dict[tuple, _Meeting] = {}
        # running | waiting | done | failed, per device
        self.status = ["running"] * self.num_devices
        self.waiting_at: list[_Meeting | None] = [None] * self.num_devices
        self.failures: dict[int, BaseException] = {}
        # Set when every device must stop (a timeout, the caller interrupted).
        self.stop: _Failure | None = None
        # The first rendezvous failure: what the run's error reports.
        self.first_failure: _Failure | None = None
        # The errors the session raised on a device (not the device's own).
        self._stop_errors: set[int] = set()

    def where(self, device: int) -> str:
        replica, partition = divmod(device, self.num_partitions)
        return f"device {device} (replica {replica}, partition {partition})"

    # -- failing

    def _fail_meeting(self, meeting: _Meeting, failure: _Failure) -> None:
        if meeting.failure is None:
            meeting.failure = failure
        if self.first_failure is None:
            self.first_failure = failure
        self.cond.notify_all()

    def _stop_all(self, failure: _Failure) -> None:
        if self.stop is None:
            self.stop = failure
        if self.first_failure is None:
            self.first_failure = failure
        self.cond.notify_all()

    def _error(self, failure: _Failure, message: str, inst: HloInstruction,
               missing: Sequence[int]) -> CollectiveError:
        error = failure.error_class(message, inst.name, missing)
        self._stop_errors.add(id(error))
        return error

    def meeting_error(self, device: int, meeting: _Meeting) -> CollectiveError:
        failure = meeting.failure
        assert failure is not None
        inst = meeting.inst
        return self._error(failure, f"{_describe(inst)} on {self.where(device)}: devices "
                                    f"{list(failure.missing)} cannot arrive: "
                                    f"{failure.message}", inst, failure.missing)

    def stopped_error(self, device: int, inst: HloInstruction) -> CollectiveError:
        failure = self.stop
        assert failure is not None
        return self._error(failure, f"{self.where(device)} stopped at {_describe(inst)}: "
                                    f"{failure.message}", inst, failure.missing)

    def raised_by_session(self, error: BaseException) -> bool:
        return id(error) in self._stop_errors

    def run_devices(self, run_device: Callable[[int], Any], what: str,
                    devices: Sequence[int] | None = None) -> list[Any]:
        """Runs `run_device(d)` for every device (or those of `devices`: a
        process' share of them) on a thread of its own and returns their
        results in device order. A device that raises is
        reported to the others (who stop at their next collective); the
        error raised here is `run_error(what, ...)`'s. Ctrl-C or any
        exception in the caller stops every device."""
        devices = list(range(self.num_devices)) if devices is None else list(devices)
        results: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}

        def run(d: int) -> None:
            try:
                results[d] = run_device(d)
            except BaseException as e:   # every failure is reported below
                error = self.device_error(d, e)
                errors[d] = error
                self.device_failed(d, error)
            else:
                self.device_finished(d)

        threads = [threading.Thread(target=run, args=(d,), daemon=True,
                                    name=f"xla_gpu-device-{d}") for d in devices]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        except BaseException:
            self.abort("the caller was interrupted")
            raise
        if errors:
            raise self.run_error(what, errors)
        return [results[d] for d in devices]

    def device_error(self, device: int, error: BaseException) -> BaseException:
        """What a device's failure is reported as (the error itself here; a
        runtime communicator words its own stops)."""
        return error

    def run_error(self, what: str, errors: dict[int, BaseException]) -> BaseException:
        """The error of a run in which devices failed (`errors`: device ->
        what it raised). The lowest failing device's own error (a note
        names the devices that failed) when no collective was left
        incomplete or every device failed on its own; otherwise a
        CollectiveError (CollectiveTimeoutError after a timeout) saying why
        the collective could not complete and what each device raised
        (`device_errors`), `instruction` and `missing` naming the first
        collective that could not complete and the devices missing there."""
        own = {d: e for d, e in sorted(errors.items()) if not self.raised_by_session(e)}
        stop = self.first_failure
        if own and (stop is None or len(own) == self.num_devices):
            device, error = next(iter(own.items()))
            error.add_note(f"(on {self.where(device)}; devices {list(own)} of "
                           f"{self.num_devices} failed)")
            return error
        reason = stop.message if stop is not None else "a device failed"
        if stop is not None and stop.instruction and not stop.timeout and \
                not stop.message.startswith("deadlock"):
            reason = (f"the collective '{stop.instruction}' cannot complete: devices "
                      f"{list(stop.missing)} cannot arrive: {reason}")
        lines = [f"{what}: {reason}"]
        for d, e in sorted(errors.items()):
            lines.append(f"  {self.where(d)}: {type(e).__name__}: {e}")
        cls = stop.error_class if stop is not None else CollectiveError
        error = cls("\n".join(lines), stop.instruction if stop else None,
                    stop.missing if stop else (), errors)
        if own:
            error.__cause__ = next(iter(own.values()))
        return error

    def _check_progress(self) -> None:
        """Fails the rendezvous that can no longer complete: one a device it
        waits for has finished or failed, or, when every unfinished device
        waits at one that has not completed, all of those (a deadlock).
        Called with the lock held."""
        for m in self.meetings.values():
            if m.complete or m.failure is not None:
                continue
            gone = [d for d in m.missing() if self.status[d] in ("done", "failed")]
            if not gone:
                continue
            failure = self.failures.get(gone[0])
            how = "finished its program without reaching it" if failure is None else \
                f"failed before reaching it ({type(failure).__name__}: {failure})"
            self._fail_meeting(m, _Failure(f"{self.where(gone[0])} {how}", m.inst.name, gone))
        # A device waiting at a rendezvous that has completed (or failed) is
        # about to run again.
        if any(s == "running" or s == "waiting" and m is not None and
               (m.complete or m.failure is not None)
               for s, m in zip(self.status, self.waiting_at)):
            return
        blocked = [(d, m) for d, m in enumerate(self.waiting_at) if m is not None]
        if blocked:
            parts = "; ".join(f"device {d} at '{m.inst.name}' for {m.missing()}"
                              for d, m in blocked)
            for _, m in blocked:
                self._fail_meeting(m, _Failure(
                    f"deadlock: every device still running waits at a collective that "
                    f"cannot complete ({parts})", m.inst.name, m.missing()))

    def device_finished(self, device: int) -> None:
        with self.cond:
            self.status[device] = "done"
            self._check_progress()
            self.cond.notify_all()

    def device_failed(self, device: int, error: BaseException) -> None:
        """A device's program raised (or the session stopped it): the
        rendezvous that wait (or will wait) for it fail; the other devices
        run on."""
        with self.cond:
            self.status[device] = "failed"
            self.failures[device] = error
            self._check_progress()
            self.cond.notify_all()

    def abort(self, message: str) -> None:
        with self.cond:
            self._stop_all(_Failure(message))

    # -- the rendezvous

    def check(self, device: int, inst: HloInstruction) -> None:
        """Raises when every device must stop (a lock-free read first: a
        device notices at its next instruction)."""
        if self.stop is not None:
            with self.cond:
                raise self.stopped_error(device, inst)

    def meet(self, ev: "DeviceEvaluator", inst: HloInstruction, group: tuple[int, ...],
             contribution: Any, compute: Callable[[list], list]) -> Any:
        """Hands this device's operands to the collective's rendezvous and
        returns its share. `compute` (given the contributions in group
        order, returning the shares in group order) runs on the last
        device to arrive."""
        device = ev.device
        if device not in group:
            raise inst.error(f"device {device} is not in its own group {list(group)}")
        key = (id(inst), ev.next_execution(inst), group)
        with self.cond:
            if self.stop is not None:
                raise self.stopped_error(device, inst)
            meeting = self.meetings.get(key)
            if meeting is None:
                meeting = self.meetings[key] = _Meeting(inst, group)
            if meeting.failure is not None:
                raise self.meeting_error(device, meeting)
            meeting.arrived[device] = contribution
            if len(meeting.arrived) < len(group):
                return self._wait(device, inst, meeting)
            meeting.complete = True
            del self.meetings[key]
        try:
            shares = compute([meeting.arrived[d] for d in group])
            if len(shares) != len(group):
                raise HloError(f"{_describe(inst)}: computed {len(shares)} shares for "
                               f"{len(group)} participants")
        except BaseException as e:
            with self.cond:
                meeting.error = e
                self.cond.notify_all()
            raise
        with self.cond:
            meeting.results = dict(zip(group, shares))
            self.cond.notify_all()
        return meeting.results[device]

    def _wait(self, device: int, inst: HloInstruction, meeting: _Meeting) -> Any:
        """Waits (lock held) until the meeting's shares are computed, it
        fails, or the run stops."""
        self.status[device] = "waiting"
        self.waiting_at[device] = meeting
        try:
            self._check_progress()
            deadline = time.monotonic() + self.timeout
            while not meeting.complete and meeting.failure is None and self.stop is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    failure = _Failure(
                        f"{_describe(inst)}: devices {meeting.missing()} did not arrive "
                        f"within {self.timeout:g} s (devices {sorted(meeting.arrived)} "
                        "waited)", inst.name, meeting.missing(), timeout=True)
                    self._fail_meeting(meeting, failure)
                    # The late devices may never arrive: stop every device.
                    self._stop_all(failure)
                    break
                self.cond.wait(remaining)
            if meeting.complete:
                # The last participant computes outside the lock; it always
                # leaves results or an error.
                while meeting.results is None and meeting.error is None:
                    self.cond.wait()
        finally:
            self.status[device] = "running"
            self.waiting_at[device] = None
        if meeting.results is not None:
            return meeting.results[device]
        if meeting.error is not None:
            error = CollectiveError(
                f"{_describe(inst)} on {self.where(device)}: the collective failed on "
                f"the device that computed it: {type(meeting.error).__name__}: "
                f"{meeting.error}", inst.name, ())
            self._stop_errors.add(id(error))
            raise error
        if meeting.failure is not None:
            raise self.meeting_error(device, meeting)
        raise self.stopped_error(device, inst)


class DeviceEvaluator(Evaluator):
    """The evaluator of one device of a multi-device run."""

    def __init__(self, session: Session, device: int):
        super().__init__()
        self.session = session
        self.device = device
        self.num_replicas, self.num_partitions = session.num_replicas, session.num_partitions
        self.replica_id, self.partition_id = divmod(device, session.num_partitions)

    def eval_instruction(self, inst, ops, batch):
        self.session.check(self.device, inst)
        return super().eval_instruction(inst, ops, batch)


def _count(module: HloModule, given: int | None, name: str) -> int:
    """A device count: the one given, else the module header's."""
    if given is None:
        return module.replica_count if name == "num_replicas" else module.num_partitions
    if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < 1:
        raise ArgumentError(f"evaluate_devices: {name}={given!r} must be a positive integer")
    return int(given)


def evaluate_devices(module: HloModule, per_device_args: Sequence[Sequence[Any]], *,
                     num_replicas: int | None = None, num_partitions: int | None = None,
                     timeout: float = 60.0) -> list[tuple[np.ndarray, ...]]:
    """Evaluates the module's ENTRY computation on every device at once:
    `per_device_args[d]` are device d's arguments (d = replica *
    num_partitions + partition). Returns each device's result leaves (as
    `evaluate` does), in device order. num_replicas and num_partitions
    default to the module header's `replica_count` and `num_partitions`
    (1 without one).

    ArgumentError for arguments that do not fit. When devices fail: the
    lowest failing device's own error (a note names the devices that
    failed) when no rendezvous failed or every device failed on its own;
    otherwise CollectiveError (CollectiveTimeoutError when a participant
    waited past `timeout` seconds), whose message says why the rendezvous
    could not complete and what each device raised: `device_errors` holds
    those errors, `instruction` and `missing` the first collective that
    could not complete and the devices that could not arrive there."""
    if not isinstance(module, HloModule):
        raise ArgumentError("evaluate_devices() takes an HloModule, got "
                            f"{type(module).__name__}")
    R = _count(module, num_replicas, "num_replicas")
    P = _count(module, num_partitions, "num_partitions")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not timeout > 0:
        raise ArgumentError(f"evaluate_devices: timeout={timeout!r} must be a positive "
                            "number of seconds")
    n = R * P
    if n > MAX_DEVICES:
        raise ArgumentError(f"evaluate_devices: {R} replicas x {P} partitions is {n} devices, "
                            f"more than the {MAX_DEVICES} (one thread each) it runs")
    if isinstance(per_device_args, (str, bytes)) or not isinstance(per_device_args, Sequence) \
            or len(per_device_args) != n:
        got = len(per_device_args) if isinstance(per_device_args, Sequence) else \
            type(per_device_args).__name__
        raise ArgumentError(f"evaluate_devices: {n} devices ({R} replicas x {P} partitions) "
                            f"need {n} argument lists, got {got}")
    comp = module.entry
    params = comp.parameters
    values: list[list[Value]] = []
    for d, args in enumerate(per_device_args):
        if not isinstance(args, Sequence) or isinstance(args, (str, bytes)):
            raise ArgumentError(f"evaluate_devices: the arguments of device {d} are not a "
                                "sequence")
        if len(args) != len(params):
            raise ArgumentError(f"device {d}: computation '{comp.name}' takes {len(params)} "
                                f"argument{'s' if len(params) != 1 else ''}, got {len(args)}")
        values.append([check_argument(p, a, where=f" of device {d}")
                       for p, a in zip(params, args)])

    # The devices share the module: restore every computation's order here,
    # once, rather than in each device's thread at its first read.
    for c in module.computations:
        c.instructions
    session = Session(R, P, float(timeout))

    def run_device(d: int) -> Value:
        with np.errstate(all="ignore"):
            return DeviceEvaluator(session, d).run(comp, values[d])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        results = session.run_devices(run_device, "evaluate_devices")
    out = []
    for value in results:
        leaves: list[np.ndarray] = []
        flatten(value, leaves)
        out.append(tuple(np.array(leaf, copy=True) for leaf in leaves))
    return out


